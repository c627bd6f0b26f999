import { Module } from '@nestjs/common';

import { DockerRuntime } from './docker-runtime.js';
import { InterposerFiles } from './interposer-files.js';

@Module({ providers: [DockerRuntime, InterposerFiles], exports: [DockerRuntime, InterposerFiles] })
export class ContainersModule {}
