import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { GqlExecutionContext } from '@nestjs/graphql';
import { ForbiddenError } from '../errors/domain-errors.js';
import { AuthService } from './auth.service.js';
import { Role, roleAtLeast } from './caller.js';
import { MIN_ROLE_KEY, PUBLIC_KEY, requestContextOf } from './decorators.js';

/**
 * The global guard: every route and root resolver needs a valid token unless marked @Public(),
 * and a role at least @MinRole() (default: VIEWER for reads, MEMBER for writes).
 */
@Injectable()
export class AuthGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly auth: AuthService,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const targets = [context.getHandler(), context.getClass()];
    if (this.reflector.getAllAndOverride<boolean>(PUBLIC_KEY, targets)) return true;
    const request = requestContextOf(context);
    const caller = await this.auth.authenticateRequest(request);
    const minimum =
      this.reflector.getAllAndOverride<Role>(MIN_ROLE_KEY, targets) ?? defaultMinRole(context);
    if (!roleAtLeast(caller.role, minimum)) {
      throw new ForbiddenError(
        `this needs a ${minimum} token or stronger; the token "${caller.tokenName}" is ${caller.role}`,
        { requiredRole: minimum, role: caller.role },
      );
    }
    return true;
  }
}

function defaultMinRole(context: ExecutionContext): Role {
  if (context.getType<string>() === 'graphql') {
    const operation = GqlExecutionContext.create(context).getInfo().operation.operation;
    return operation === 'mutation' ? Role.MEMBER : Role.VIEWER;
  }
  const method = context.switchToHttp().getRequest<{ method: string }>().method;
  return method === 'GET' || method === 'HEAD' ? Role.VIEWER : Role.MEMBER;
}
