import {
  Inject,
  Module,
  type DynamicModule,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import { ElasticModule } from '../elastic/elastic.module.js';
import { FleetModule } from '../fleet/fleet.module.js';
import { AgentMessagesService } from './agent-messages.service.js';
import type { AgentTransport } from './agent-transport.js';

const AGENT_TRANSPORT = Symbol('AgentTransport');

/**
 * The control plane's side of the agent link: agent messages from the transport (NATS or
 * in-process) go to AgentMessagesService from the moment the application has started (the
 * database is migrated, the fleet cache loaded) until it closes; handling in progress is
 * awaited before the database closes. Commands go out through AgentCommandClient, which
 * createControlPlane provides as SHARD_COMMANDS.
 */
@Module({})
export class AgentLinkModule implements OnApplicationBootstrap, OnModuleDestroy {
  static forRoot(transport: AgentTransport): DynamicModule {
    return {
      module: AgentLinkModule,
      imports: [FleetModule, ElasticModule],
      providers: [{ provide: AGENT_TRANSPORT, useValue: transport }, AgentMessagesService],
    };
  }

  constructor(
    @Inject(AGENT_TRANSPORT) private readonly transport: AgentTransport,
    private readonly messages: AgentMessagesService,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    await this.transport.listen((message) => this.messages.handle(message));
  }

  async onModuleDestroy(): Promise<void> {
    await this.transport.stopListening();
  }
}
