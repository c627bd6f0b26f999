import { BadRequestException, HttpException, HttpStatus } from '@nestjs/common';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type {
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  RouteHandlerMethod,
  RouteOptions,
} from 'fastify';
import { GRAPHQL_PATH } from '../graphql/graphql-api.module.js';

/**
 * Request bodies up to this size are parsed, so that oversized fields reach input validation
 * and get a BAD_USER_INPUT naming the field rather than a bare 413. Larger ones get a 413 from
 * their length alone, before a byte is parsed: JSON.parse of a 663 KiB body of 5,000 aliases
 * took 4 ms of the one event loop, and 20 such requests a second from a hostile client set the
 * p99 of everyone else's requests (bench/README.md, "API limits under abuse"). 256 KiB is eight
 * times the largest valid launch spec (32 KiB of env) and far above any query the portal sends.
 */
export const JSON_BODY_LIMIT_BYTES = 256 * 1024;

/** Node's defaults, which express kept (Fastify's own are 72 s and none). */
const KEEP_ALIVE_TIMEOUT_MS = 5_000;
const REQUEST_TIMEOUT_MS = 300_000;

/**
 * The control plane's HTTP layer: Fastify, set up to answer as express did where a client can
 * tell. docs/api.md lists what still differs. Pass it to NestFactory.create with
 * `bodyParser: false`: the JSON parser here is the only body parser.
 */
export function createHttpAdapter(): FastifyAdapter {
  const adapter = new FastifyAdapter({
    bodyLimit: JSON_BODY_LIMIT_BYTES,
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
    requestTimeout: REQUEST_TIMEOUT_MS,
    // As express routes: /GRAPHQL and /graphql/ are /graphql.
    routerOptions: { caseSensitive: false, ignoreTrailingSlash: true },
  });
  const fastify = adapter.getInstance();
  useExpressLikeJsonParser(fastify);
  useFormParserWhereNeeded(fastify);
  fastify.addHook('onRoute', toleratingBadHost);
  fastify.route({ method: ['PUT', 'PATCH', 'DELETE'], url: GRAPHQL_PATH, handler: onlyGetPost });
  fastify.addHook('onRequest', browsersToExplorer);
  return adapter;
}

/**
 * A browser opening the GraphQL URL (GET, accepting HTML, no `query` parameter) is sent to the
 * explorer: Apollo would answer it with a CSRF-prevention error, which helps no one there.
 */
function browsersToExplorer(request: FastifyRequest, reply: FastifyReply, done: () => void): void {
  if (request.method === 'GET' && isBrowserVisit(request)) {
    void reply.redirect('/explorer', 302);
    return;
  }
  done();
}

function isBrowserVisit(request: FastifyRequest): boolean {
  const [path = '', search = ''] = request.url.split('?', 2);
  if (path.replace(/\/+$/, '').toLowerCase() !== GRAPHQL_PATH) return false;
  if (new URLSearchParams(search).has('query')) return false;
  return (request.headers.accept ?? '').includes('text/html');
}

/**
 * application/json (any parameters; a charset other than UTF-8 is a 415) parsed like express's
 * body parser: an empty body is no body (Apollo answers 400 BAD_REQUEST "POST body missing"),
 * invalid JSON is a 400 with JSON.parse's message, and nothing is refused for its keys
 * (Fastify's own parser refuses "__proto__" and "constructor" keys; GraphQL input coercion
 * keeps only declared fields anyway). Other content types are not read, as under express,
 * rather than a 415: /graphql then answers with Apollo's 400 that says which to send.
 */
function useExpressLikeJsonParser(fastify: FastifyInstance): void {
  fastify.removeAllContentTypeParsers();
  fastify.addContentTypeParser('*', (_request, payload, done) => {
    payload.resume(); // drained, not kept
    done(null, undefined);
  });
  fastify.addContentTypeParser(
    'application/json',
    { parseAs: 'string', bodyLimit: JSON_BODY_LIMIT_BYTES },
    (request, body, done) => {
      const charset = charsetOf(request.headers['content-type']);
      if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
        done(
          new HttpException(
            `unsupported charset "${charset.toUpperCase()}"`,
            HttpStatus.UNSUPPORTED_MEDIA_TYPE,
          ),
        );
        return;
      }
      if (body === '') {
        done(null, undefined);
        return;
      }
      try {
        done(null, JSON.parse(body as string));
      } catch (error) {
        done(new BadRequestException((error as Error).message));
      }
    },
  );
}

/** Where a form body is read: OIDC Back-Channel Logout 1.0 posts `logout_token` as a form. */
export const FORM_BODY_PATHS: ReadonlySet<string> = new Set(['/auth/oidc/backchannel-logout']);
const FORM_BODY_LIMIT_BYTES = 64 * 1024;

/**
 * application/x-www-form-urlencoded, parsed to an object of strings on FORM_BODY_PATHS only;
 * elsewhere not read (as before: /graphql answers with Apollo's 400, and its CSRF prevention
 * refuses such simple requests anyway).
 */
function useFormParserWhereNeeded(fastify: FastifyInstance): void {
  fastify.addContentTypeParser(
    'application/x-www-form-urlencoded',
    { parseAs: 'string', bodyLimit: FORM_BODY_LIMIT_BYTES },
    (request, body, done) => {
      const path = (request.url.split('?', 1)[0] ?? '').replace(/\/+$/, '').toLowerCase();
      if (!FORM_BODY_PATHS.has(path)) {
        done(null, undefined);
        return;
      }
      done(null, Object.fromEntries(new URLSearchParams(body as string)));
    },
  );
}

function charsetOf(contentType: string | undefined): string | undefined {
  if (contentType === undefined || !contentType.includes(';')) return undefined;
  return /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(contentType)?.[1]?.toLowerCase();
}

/**
 * @as-integrations/fastify builds `new URL(request.url, protocol://hostname/)` only for the query
 * string; with a Host header that is not a host name (or none, in HTTP/1.0) that throws, a 500.
 * express ignored the Host header there: so does this, by handing Apollo's handler a view of
 * the request with a neutral host name.
 */
function toleratingBadHost(route: RouteOptions): void {
  const methods = Array.isArray(route.method) ? route.method : [route.method];
  if (route.url !== GRAPHQL_PATH || !methods.includes('POST')) return;
  const handler = route.handler;
  route.handler = function (this: FastifyInstance, request: FastifyRequest, reply: FastifyReply) {
    const usable = URL.canParse(request.url, `${request.protocol}://${request.hostname}/`)
      ? request
      : (Object.create(request, { hostname: { value: 'localhost' } }) as FastifyRequest);
    return handler.call(this, usable, reply);
  } as RouteHandlerMethod;
}

/** What Apollo Server answered under express for methods other than GET and POST. */
function onlyGetPost(_request: FastifyRequest, reply: FastifyReply): FastifyReply {
  return reply
    .status(HttpStatus.METHOD_NOT_ALLOWED)
    .header('allow', 'GET, POST')
    .send({
      errors: [
        {
          message: 'Apollo Server supports only GET/POST requests.',
          extensions: { code: 'BAD_REQUEST' },
        },
      ],
    });
}
