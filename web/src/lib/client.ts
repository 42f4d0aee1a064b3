// One GraphQL client per token: queries and mutations over HTTP, subscriptions over one
// graphql-transport-ws connection that reconnects on its own.
import { createClient as createWsClient, type Client as WsClient } from "graphql-ws";
import { retryExchange } from "@urql/exchange-retry";
import { Client, cacheExchange, fetchExchange, subscriptionExchange } from "urql";
import type { CombinedError, Operation } from "urql";
import { authHeaders } from "./auth";

/** Close code the server uses for a websocket without valid credentials. */
export const UNAUTHORIZED_CLOSE = 4401;

export interface Clients {
  urql: Client;
  ws: WsClient;
}

export function websocketUrl(location: Location = window.location): string {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/graphql`;
}

/** Wait before the nth reconnection: quick first, at most 5 s. */
export function retryDelay(retries: number): number {
  return Math.min(250 * 2 ** retries, 5000);
}

/** Whether a failed operation is asked again: a query whose request got no answer (the browser
 * drops requests in flight when the host's networks change; a server restarting), never a
 * mutation, which may have been carried out. */
export function retriesAfter(error: CombinedError, operation: Pick<Operation, "kind">): boolean {
  return Boolean(error.networkError) && operation.kind === "query";
}

export function makeClients(token: string | null): Clients {
  const ws = createWsClient({
    url: websocketUrl(),
    connectionParams: () => authHeaders(token),
    retryAttempts: Number.MAX_SAFE_INTEGER,
    retryWait: (retries) => new Promise((resolve) => setTimeout(resolve, retryDelay(retries))),
    shouldRetry: (closed) =>
      !(closed instanceof CloseEvent && closed.code === UNAUTHORIZED_CLOSE),
    keepAlive: 15_000,
  });
  const urql = new Client({
    url: "/graphql",
    exchanges: [
      cacheExchange,
      retryExchange({
        initialDelayMs: 250,
        maxDelayMs: 5000,
        maxNumberAttempts: 6,
        retryIf: retriesAfter,
      }),
      fetchExchange,
      subscriptionExchange({
        forwardSubscription(request) {
          const input = { ...request, query: request.query || "" };
          return {
            subscribe(sink) {
              return { unsubscribe: ws.subscribe(input, sink) };
            },
          };
        },
      }),
    ],
    fetchOptions: () => ({ headers: authHeaders(token) }),
    requestPolicy: "cache-and-network",
    preferGetMethod: false,
  });
  return { urql, ws };
}
