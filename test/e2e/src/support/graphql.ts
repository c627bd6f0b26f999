export interface GraphqlError {
  readonly message: string;
  readonly extensions?: { code?: string; [key: string]: unknown };
}

export interface GraphqlResponse<T> {
  readonly data?: T | null;
  readonly errors?: readonly GraphqlError[];
}

/** A GraphQL call that came back with errors. */
export class GraphqlCallError extends Error {
  override name = 'GraphqlCallError';
  constructor(
    readonly errors: readonly GraphqlError[],
    readonly url: string,
  ) {
    super(`${url}: ${errors.map((e) => `${e.extensions?.code ?? '?'}: ${e.message}`).join('; ')}`);
  }

  get code(): string | undefined {
    return this.errors[0]?.extensions?.code;
  }
}

/** POST /graphql with a bearer token; nothing else of the system is reached this way. */
export async function graphqlResponse<T>(
  url: string,
  token: string,
  query: string,
  variables: Record<string, unknown> = {},
  timeoutMs = 30_000,
): Promise<GraphqlResponse<T>> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await response.text();
  try {
    return JSON.parse(text) as GraphqlResponse<T>;
  } catch {
    throw new Error(`${url} answered ${response.status} with no JSON: ${text.slice(0, 300)}`);
  }
}

/** The data, or a GraphqlCallError. */
export async function graphql<T>(
  url: string,
  token: string,
  query: string,
  variables: Record<string, unknown> = {},
): Promise<T> {
  const response = await graphqlResponse<T>(url, token, query, variables);
  if (response.errors !== undefined && response.errors.length > 0) {
    throw new GraphqlCallError(response.errors, url);
  }
  if (response.data === undefined || response.data === null) {
    throw new Error(`${url}: no data and no errors`);
  }
  return response.data;
}

/** Runs `call` expecting a GraphQL error; returns it. */
export async function expectGraphqlError(call: () => Promise<unknown>): Promise<GraphqlCallError> {
  try {
    const value = await call();
    throw new Error(`expected a GraphQL error, got ${JSON.stringify(value)}`);
  } catch (error) {
    if (error instanceof GraphqlCallError) return error;
    throw error;
  }
}

export const SHARD_FIELDS = `
  id name state hostId containerId failureReason exitCode idempotencyKey teamId
  memoryPerGpu { bytes } limitPerGpu { bytes } totalMemory { bytes } gpuCount placementPolicy
  gpus { gpuUuid index model reserved { bytes } used { bytes } releasedAt }
`;

export interface ShardView {
  id: string;
  name: string;
  state: string;
  hostId: string | null;
  containerId: string | null;
  failureReason: string | null;
  exitCode: number | null;
  idempotencyKey: string | null;
  teamId: string;
  memoryPerGpu: { bytes: string };
  limitPerGpu: { bytes: string };
  totalMemory: { bytes: string };
  gpuCount: number;
  placementPolicy: string;
  gpus: {
    gpuUuid: string;
    index: number;
    model: string;
    reserved: { bytes: string };
    used: { bytes: string };
    releasedAt: string | null;
  }[];
}

export const HOST_FIELDS = `
  id name state cordoned simulated lastHeartbeatAt registeredAt contextOverhead { bytes }
  memory { total { bytes } reserved { bytes } capacity { bytes } free { bytes } }
  gpus {
    uuid index model total { bytes } capacity { bytes } reserved { bytes } free { bytes } used { bytes }
  }
`;

export interface HostView {
  id: string;
  name: string;
  state: string;
  cordoned: boolean;
  simulated: boolean;
  lastHeartbeatAt: string | null;
  registeredAt: string;
  contextOverhead: { bytes: string };
  memory: {
    total: { bytes: string };
    reserved: { bytes: string };
    capacity: { bytes: string };
    free: { bytes: string };
  };
  gpus: {
    uuid: string;
    index: number;
    model: string;
    total: { bytes: string };
    capacity: { bytes: string };
    reserved: { bytes: string };
    free: { bytes: string };
    used: { bytes: string };
  }[];
}
