/**
 * Image allow-lists: a shard's image must start with one of the prefixes, compared after
 * Docker's normalisation ("ubuntu:22.04" is "docker.io/library/ubuntu:22.04", "team/x" is
 * "docker.io/team/x"), and only at a boundary: "registry.example.com" allows
 * "registry.example.com/x" and "registry.example.com:5000/x" but not
 * "registry.example.com.evil.io/x"; "docker.io/library/ubuntu" allows "…/ubuntu:22.04" and
 * "…/ubuntu@sha256:…" but not "…/ubuntu-evil". An empty list allows every image.
 */

const DOCKER_HUB = 'docker.io';

/** Docker's rule for the first component of a reference: a registry, not a repository. */
function isRegistry(component: string): boolean {
  return component.includes('.') || component.includes(':') || component === 'localhost';
}

/** The reference with Docker's default registry and "library/" spelled out. */
export function normalizeImageReference(image: string): string {
  const slash = image.indexOf('/');
  const first = slash === -1 ? '' : image.slice(0, slash);
  if (slash !== -1 && isRegistry(first)) {
    return first === 'index.docker.io' ? DOCKER_HUB + image.slice(slash) : image;
  }
  return slash === -1 ? `${DOCKER_HUB}/library/${image}` : `${DOCKER_HUB}/${image}`;
}

/** Whether `image` (a valid reference) is under `prefix` (itself normalised), at a boundary. */
export function imageUnderPrefix(image: string, prefix: string): boolean {
  const normalizedImage = normalizeImageReference(image);
  // A prefix without "/" is a registry ("ghcr.io") or a Docker Hub repository ("ubuntu").
  const normalizedPrefix =
    !prefix.includes('/') && isRegistry(prefix) ? prefix : normalizeImageReference(prefix);
  if (!normalizedImage.startsWith(normalizedPrefix)) return false;
  if (normalizedPrefix.endsWith('/')) return true;
  const next = normalizedImage.charAt(normalizedPrefix.length);
  return next === '' || next === '/' || next === ':' || next === '@';
}

/** Whether `image` passes `allowList` (empty: everything passes). */
export function imageAllowed(image: string, allowList: readonly string[]): boolean {
  return allowList.length === 0 || allowList.some((prefix) => imageUnderPrefix(image, prefix));
}
