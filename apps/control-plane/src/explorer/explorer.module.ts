import { Module } from '@nestjs/common';
import { ExplorerController } from './explorer.controller.js';

@Module({ controllers: [ExplorerController] })
export class ExplorerModule {}
