// GraphiQL, built from the npm package into paigraph's own assets: no CDN, works offline.
// The signed-in token of the app (if any) goes with every request and subscription.
import "graphiql/setup-workers/vite";
import "graphiql/style.css";
import { createGraphiQLFetcher } from "@graphiql/toolkit";
import { GraphiQL } from "graphiql";
import { createRoot } from "react-dom/client";
import { authHeaders, getToken } from "./lib/auth";
import { websocketUrl } from "./lib/client";

const headers = authHeaders(getToken());
const fetcher = createGraphiQLFetcher({
  url: "/graphql",
  subscriptionUrl: websocketUrl(),
  headers,
  wsConnectionParams: headers,
});

const root = document.getElementById("graphiql");
if (root) {
  createRoot(root).render(
    <GraphiQL fetcher={fetcher} defaultQuery={"{\n  viewer { name admin }\n  version\n}\n"} />,
  );
}
