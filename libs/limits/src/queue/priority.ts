/**
 * Priority classes: what kind of work a shard is, which orders the queue and decides whether
 * the shard may be preempted. Higher rank goes first. A non-preemptible class is never a
 * reclaim victim, so only a team's guaranteed capacity may hold it (it never borrows).
 */

export interface PriorityClass {
  /** As written in the API ("inference"); unique, compared case-sensitively. */
  readonly name: string;
  /** Higher goes first; unique across the classes. */
  readonly rank: number;
  /** false: never stopped to make room, and admitted only within the team's guarantee. */
  readonly preemptible: boolean;
}

/** inference > build > training; inference is never preempted. */
export const DEFAULT_PRIORITY_CLASSES: readonly PriorityClass[] = [
  { name: 'inference', rank: 300, preemptible: false },
  { name: 'build', rank: 200, preemptible: true },
  { name: 'training', rank: 100, preemptible: true },
];

/** What a shard that names no class gets. */
export const DEFAULT_PRIORITY_CLASS = 'build';

export interface PriorityClasses {
  readonly list: readonly PriorityClass[];
  /** undefined for an unknown name. */
  get(name: string): PriorityClass | undefined;
  /** The class, or a RangeError that lists the known names. */
  require(name: string): PriorityClass;
}

/** Checks the classes (names and ranks unique, ranks finite) and indexes them by name. */
export function priorityClasses(
  list: readonly PriorityClass[] = DEFAULT_PRIORITY_CLASSES,
): PriorityClasses {
  if (list.length === 0) throw new RangeError('at least one priority class is needed');
  const byName = new Map<string, PriorityClass>();
  const ranks = new Set<number>();
  for (const cls of list) {
    if (cls.name.trim() === '' || cls.name !== cls.name.trim()) {
      throw new RangeError(`priority class name "${cls.name}" must be non-empty and trimmed`);
    }
    if (!Number.isSafeInteger(cls.rank)) {
      throw new RangeError(`priority class "${cls.name}": rank must be a whole number`);
    }
    if (byName.has(cls.name)) throw new RangeError(`priority class "${cls.name}" is defined twice`);
    if (ranks.has(cls.rank)) {
      throw new RangeError(`priority class "${cls.name}": rank ${cls.rank} is used twice`);
    }
    byName.set(cls.name, cls);
    ranks.add(cls.rank);
  }
  const sorted = [...list].sort((a, b) => b.rank - a.rank);
  return {
    list: sorted,
    get: (name) => byName.get(name),
    require(name) {
      const cls = byName.get(name);
      if (cls === undefined) {
        throw new RangeError(
          `unknown priority class "${name}" (known: ${sorted.map((c) => `"${c.name}"`).join(', ')})`,
        );
      }
      return cls;
    },
  };
}

export type ClassDecision =
  | { readonly allowed: true; readonly cls: PriorityClass }
  | { readonly allowed: false; readonly message: string };

/**
 * Whether a team may use the class: it must exist and not rank above the team's cap (the
 * highest class its policy allows; absent = any class).
 */
export function checkPriorityClass(
  classes: PriorityClasses,
  name: string,
  teamMaxClass: string | undefined,
): ClassDecision {
  const cls = classes.get(name);
  if (cls === undefined) {
    const known = classes.list.map((c) => `"${c.name}"`).join(', ');
    return { allowed: false, message: `unknown priority class "${name}" (known: ${known})` };
  }
  if (teamMaxClass === undefined) return { allowed: true, cls };
  const cap = classes.require(teamMaxClass);
  if (cls.rank > cap.rank) {
    return {
      allowed: false,
      message:
        `priority class "${cls.name}" is above this team's highest allowed class ` +
        `"${cap.name}"`,
    };
  }
  return { allowed: true, cls };
}
