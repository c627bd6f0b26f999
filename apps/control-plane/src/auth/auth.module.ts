import { Global, Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { AdminTokenBootstrap } from './admin-token.bootstrap.js';
import { AuthGuard } from './auth.guard.js';
import { AuthService } from './auth.service.js';
import { TokenRevocationListener } from './token-revocation-listener.js';

/** Global: AuthGuard protects every route and resolver; AuthService also serves graphql-ws. */
@Global()
@Module({
  providers: [
    AuthService,
    AdminTokenBootstrap,
    TokenRevocationListener,
    { provide: APP_GUARD, useClass: AuthGuard },
  ],
  exports: [AuthService],
})
export class AuthModule {}
