import { createParamDecorator, SetMetadata, type ExecutionContext } from '@nestjs/common';
import { GqlExecutionContext } from '@nestjs/graphql';
import type { Caller, Role } from './caller.js';
import type { RequestContext } from './request-context.js';

export const PUBLIC_KEY = 'gpushards:public';
export const MIN_ROLE_KEY = 'gpushards:minRole';

/** No token needed (health, metrics, the explorer page). Everything else requires one. */
export const Public = () => SetMetadata(PUBLIC_KEY, true);

/**
 * The weakest role that may call this resolver or controller. Without it, queries need any
 * token and mutations need MEMBER, so a new mutation is never open to VIEWER by accident.
 */
export const MinRole = (role: Role) => SetMetadata(MIN_ROLE_KEY, role);

/** The authenticated token of this request (set by AuthGuard). */
export const CurrentCaller = createParamDecorator((_: unknown, context: ExecutionContext) => {
  const caller = requestContextOf(context).caller;
  if (caller === undefined) throw new Error('CurrentCaller used on a handler without AuthGuard');
  return caller satisfies Caller;
});

/** The GraphQL context, or for plain HTTP routes a RequestContext kept on the request. */
export function requestContextOf(context: ExecutionContext): RequestContext {
  if (context.getType<string>() === 'graphql') {
    return GqlExecutionContext.create(context).getContext<RequestContext>();
  }
  const request = context.switchToHttp().getRequest<HttpRequestWithContext>();
  request.gpushards ??= { authorization: request.headers.authorization };
  return request.gpushards;
}

interface HttpRequestWithContext {
  headers: { authorization?: string };
  gpushards?: RequestContext;
}
