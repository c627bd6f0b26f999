import { Inject, Injectable } from '@nestjs/common';
import type Docker from 'dockerode';
import type { ContainerCreateOptions } from 'dockerode';

import { errorMessage } from '@gpushards/protocol';
import { LOGGER, type Logger } from '../logging/logger.js';
import { hostLabelFilters, LABELS } from './labels.js';
import { pullReference } from './container-spec.js';
import { PullProgressTracker, type PullEvent, type PullProgress } from './pull-progress.js';

/** Injection token of the dockerode client. */
export const DOCKER = Symbol('Docker');

/** A shard container as Docker lists it. */
export interface ShardContainer {
  readonly id: string;
  readonly shardId: string;
  readonly teamId: string;
  readonly running: boolean;
  /** Docker's state word: created, running, exited, dead, ... */
  readonly state: string;
  /** The shard's GPU UUIDs in CUDA_DEVICE_MEMORY_LIMIT_<i> order. */
  readonly gpuUuids: readonly string[];
}

export interface ContainerStatus {
  readonly running: boolean;
  readonly exitCode: number;
  readonly state: string;
}

/** A container of this host started, died or was removed. */
export interface ContainerEvent {
  readonly action: 'start' | 'die' | 'destroy';
  readonly containerId: string;
  readonly shardId: string;
  readonly exitCode?: number;
}

/** Docker refused or failed; the message says what Docker said. */
export class RuntimeError extends Error {
  override name = 'RuntimeError';
}

const EVENT_RETRY_MS = 1000;

/** The Docker engine operations the agent needs, on shard containers of one host only. */
@Injectable()
export class DockerRuntime {
  private readonly logger: Logger;

  constructor(
    @Inject(DOCKER) private readonly docker: Docker,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'docker' });
  }

  async imagePresent(image: string): Promise<boolean> {
    try {
      await this.docker.getImage(image).inspect();
      return true;
    } catch (error) {
      if (statusCode(error) === 404) return false;
      throw runtimeError(`cannot inspect image ${image}`, error);
    }
  }

  /** Pulls an image, reporting progress as it goes; rejects with Docker's reason. */
  async pullImage(image: string, onProgress: (progress: PullProgress) => void): Promise<void> {
    const reference = pullReference(image);
    let stream: NodeJS.ReadableStream;
    try {
      stream = (await this.docker.createImage({ fromImage: reference })) as NodeJS.ReadableStream;
    } catch (error) {
      throw runtimeError(`cannot pull ${reference}`, error);
    }
    const tracker = new PullProgressTracker();
    await new Promise<void>((resolve, reject) => {
      let failure: string | undefined;
      this.docker.modem.followProgress(
        stream,
        (error: Error | null) => {
          if (error) reject(runtimeError(`pulling ${reference} failed`, error));
          else if (failure !== undefined)
            reject(new RuntimeError(`pulling ${reference} failed: ${failure}`));
          else resolve();
        },
        (event: PullEvent) => {
          const error = tracker.apply(event);
          if (error !== undefined) failure ??= error;
          else onProgress(tracker.progress());
        },
      );
    });
  }

  async createContainer(options: ContainerCreateOptions): Promise<string> {
    try {
      return (await this.docker.createContainer(options)).id;
    } catch (error) {
      throw runtimeError(`cannot create container ${options.name ?? ''}`, error);
    }
  }

  async startContainer(id: string): Promise<void> {
    try {
      await this.docker.getContainer(id).start();
    } catch (error) {
      if (statusCode(error) === 304) return; // already running
      throw runtimeError(`cannot start container ${id}`, error);
    }
  }

  async unpauseContainer(id: string): Promise<void> {
    try {
      await this.docker.getContainer(id).unpause();
    } catch (error) {
      if (statusCode(error) === 409 && /not paused/i.test(errorMessage(error))) return;
      throw runtimeError(`cannot unpause container ${id}`, error);
    }
  }

  /** SIGTERM, then SIGKILL after graceSeconds (Docker's stop). False if it was not running. */
  async stopContainer(id: string, graceSeconds: number): Promise<boolean> {
    try {
      await this.docker.getContainer(id).stop({ t: graceSeconds });
      return true;
    } catch (error) {
      const code = statusCode(error);
      if (code === 304 || code === 404) return false;
      throw runtimeError(`cannot stop container ${id}`, error);
    }
  }

  /** Removes a container, running or not. False if it was already gone. */
  async removeContainer(id: string): Promise<boolean> {
    try {
      await this.docker.getContainer(id).remove({ force: true, v: true });
      return true;
    } catch (error) {
      if (statusCode(error) === 404) return false;
      // 409: removal already in progress; it will be gone.
      if (statusCode(error) === 409 && /already in progress/i.test(errorMessage(error)))
        return true;
      throw runtimeError(`cannot remove container ${id}`, error);
    }
  }

  /** undefined when the container does not exist. */
  async status(id: string): Promise<ContainerStatus | undefined> {
    try {
      const info = await this.docker.getContainer(id).inspect();
      return {
        running: info.State.Running,
        exitCode: info.State.ExitCode,
        state: info.State.Status,
      };
    } catch (error) {
      if (statusCode(error) === 404) return undefined;
      throw runtimeError(`cannot inspect container ${id}`, error);
    }
  }

  /** Every shard container of this host, running or not. */
  async listShardContainers(hostId: string): Promise<ShardContainer[]> {
    let listed: Docker.ContainerInfo[];
    try {
      listed = await this.docker.listContainers({
        all: true,
        filters: { label: hostLabelFilters(hostId) },
      });
    } catch (error) {
      throw runtimeError('cannot list containers', error);
    }
    return listed.flatMap((info) => {
      const shardId = info.Labels[LABELS.shard];
      if (shardId === undefined) return [];
      return [
        {
          id: info.Id,
          shardId,
          teamId: info.Labels[LABELS.team] ?? '',
          running: info.State === 'running',
          state: info.State,
          gpuUuids: (info.Labels[LABELS.gpus] ?? '').split(',').filter((uuid) => uuid !== ''),
        },
      ];
    });
  }

  /**
   * Follows start/die/destroy of this host's shard containers until `signal` aborts,
   * reconnecting when the stream breaks (the periodic sweep covers what was missed).
   */
  watchEvents(hostId: string, onEvent: (event: ContainerEvent) => void, signal: AbortSignal): void {
    const follow = async (): Promise<void> => {
      while (!signal.aborted) {
        try {
          const stream = (await this.docker.getEvents({
            filters: {
              type: ['container'],
              event: ['start', 'die', 'destroy'],
              label: hostLabelFilters(hostId),
            },
          })) as NodeJS.ReadableStream & { destroy?: () => void };
          const stop = (): void => stream.destroy?.();
          signal.addEventListener('abort', stop, { once: true });
          await readJsonLines(stream, (value) => {
            const event = toContainerEvent(value);
            if (event) onEvent(event);
          });
          signal.removeEventListener('abort', stop);
        } catch (error) {
          if (!signal.aborted)
            this.logger.warn({ err: error }, 'the Docker event stream broke; following it again');
        }
        if (!signal.aborted) await new Promise((resolve) => setTimeout(resolve, EVENT_RETRY_MS));
      }
    };
    void follow();
  }
}

function toContainerEvent(value: unknown): ContainerEvent | undefined {
  const event = value as {
    Action?: string;
    id?: string;
    Actor?: { ID?: string; Attributes?: Record<string, string> };
  };
  const action = event.Action;
  if (action !== 'start' && action !== 'die' && action !== 'destroy') return undefined;
  const containerId = event.Actor?.ID ?? event.id;
  const shardId = event.Actor?.Attributes?.[LABELS.shard];
  if (containerId === undefined || shardId === undefined) return undefined;
  const rawExit = event.Actor?.Attributes?.exitCode;
  const exitCode = rawExit === undefined ? undefined : Number(rawExit);
  return {
    action,
    containerId,
    shardId,
    ...(exitCode !== undefined && Number.isInteger(exitCode) ? { exitCode } : {}),
  };
}

async function readJsonLines(
  stream: NodeJS.ReadableStream,
  onValue: (value: unknown) => void,
): Promise<void> {
  let pending = '';
  for await (const chunk of stream) {
    pending += typeof chunk === 'string' ? chunk : chunk.toString('utf8');
    let newline: number;
    while ((newline = pending.indexOf('\n')) !== -1) {
      const line = pending.slice(0, newline).trim();
      pending = pending.slice(newline + 1);
      if (line === '') continue;
      try {
        onValue(JSON.parse(line));
      } catch {
        // Not an event: ignore.
      }
    }
  }
}

function statusCode(error: unknown): number | undefined {
  const code = (error as { statusCode?: unknown } | null)?.statusCode;
  return typeof code === 'number' ? code : undefined;
}

function runtimeError(what: string, error: unknown): RuntimeError {
  const json = (error as { json?: { message?: string } } | null)?.json;
  const detail = json?.message ?? errorMessage(error);
  return new RuntimeError(`${what}: ${detail}`, { cause: error });
}
