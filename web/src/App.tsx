// The frame of every page: who is signed in, the navigation, and the routes.
import { lazy, Suspense, useEffect, useMemo, useRef, useState } from "react";
import { BrowserRouter, Link, NavLink, Route, Routes } from "react-router-dom";
import { Provider, useQuery } from "urql";
import { getToken, onTokenChange, setToken } from "./lib/auth";
import { makeClients, type Clients } from "./lib/client";
import { describeProblem } from "./lib/errors";
import { JobPage } from "./pages/JobPage";
import { JobsPage } from "./pages/JobsPage";
import { SignInPage } from "./pages/SignInPage";
import { ViewerQuery } from "./App.operations";
import { SessionContext, type Session } from "./session";

// The first page (the jobs list, or a job) loads only its own code; every other page comes in
// a chunk of its own when it is opened: the Submit and publish pages bring their editor
// (CodeMirror), the marketplace its Markdown, the cluster and users pages what only admins use.
const SubmitPage = lazy(() => import("./submit/SubmitPage"));
const ClusterPage = lazy(() => import("./pages/ClusterPage").then((m) => ({ default: m.ClusterPage })));
const UsersPage = lazy(() => import("./pages/UsersPage").then((m) => ({ default: m.UsersPage })));
const MarketplacePage = lazy(() =>
  import("./marketplace/MarketplacePage").then((m) => ({ default: m.MarketplacePage })),
);
const ItemPage = lazy(() => import("./marketplace/ItemPage").then((m) => ({ default: m.ItemPage })));
const PublishPage = lazy(() => import("./marketplace/PublishPage").then((m) => ({ default: m.PublishPage })));
const EditPage = lazy(() => import("./marketplace/PublishPage").then((m) => ({ default: m.EditPage })));

function Later({ children }: { children: React.ReactNode }) {
  return <Suspense fallback={<p className="muted">Loading…</p>}>{children}</Suspense>;
}

export function App() {
  const [token, setCurrentToken] = useState(getToken());
  useEffect(() => onTokenChange(() => setCurrentToken(getToken())), []);
  const clients = useMemo(() => makeClients(token), [token]);
  // The previous token's connection closes once the new clients are in use (not in an effect's
  // cleanup, which StrictMode runs once more in development while the clients are still used).
  const previous = useRef<Clients | null>(null);
  useEffect(() => {
    const old = previous.current;
    previous.current = clients;
    if (old && old !== clients) void old.ws.dispose();
  }, [clients]);
  return (
    <Provider value={clients.urql}>
      <BrowserRouter>
        <Signed key={token ?? ""} clients={clients} hasToken={token !== null} />
      </BrowserRouter>
    </Provider>
  );
}

function Signed({ clients, hasToken }: { clients: Clients; hasToken: boolean }) {
  const [{ data, error, fetching }] = useQuery({ query: ViewerQuery, requestPolicy: "network-only" });
  const session: Session | null = useMemo(
    () => (data ? { viewer: data.viewer, clients } : null),
    [data, clients],
  );
  if (fetching && !data) return <Frame version={null} />;
  if (error || !session) {
    const problem = error ? describeProblem(error) : null;
    if (problem && problem.kind !== "unauthorized") {
      return (
        <Frame version={null}>
          <p className="error" role="alert">{problem.message}</p>
        </Frame>
      );
    }
    return (
      <Frame version={null}>
        <SignInPage
          problem={hasToken ? `That token was not accepted: ${problem?.message ?? ""}` : problem?.message ?? null}
        />
      </Frame>
    );
  }
  return (
    <SessionContext.Provider value={session}>
      <Frame version={data?.version ?? null} session={session}>
        <Routes>
          <Route path="/" element={<JobsPage />} />
          <Route path="/jobs" element={<JobsPage />} />
          <Route path="/jobs/:ref" element={<JobPage />} />
          <Route path="/cluster" element={<Later><ClusterPage /></Later>} />
          <Route path="/submit" element={<Later><SubmitPage /></Later>} />
          <Route path="/marketplace" element={<Later><MarketplacePage /></Later>} />
          <Route path="/marketplace/publish" element={<Later><PublishPage /></Later>} />
          <Route path="/marketplace/:id" element={<Later><ItemPage /></Later>} />
          <Route path="/marketplace/:id/edit" element={<Later><EditPage /></Later>} />
          <Route path="/users" element={<Later><UsersPage /></Later>} />
          <Route path="/signin" element={<SignInPage problem={null} />} />
          <Route path="*" element={<p className="error" role="alert">There is no page at this address. <Link to="/">See the jobs</Link>.</p>} />
        </Routes>
      </Frame>
    </SessionContext.Provider>
  );
}

function Frame({
  session,
  version,
  children,
}: {
  session?: Session;
  version: string | null;
  children?: React.ReactNode;
}) {
  return (
    <>
      <header className="top">
        <Link to="/" className="brand">paigraph</Link>
        {session && (
          <nav>
            <NavLink to="/" end>Jobs</NavLink>
            <NavLink to="/submit">Submit job</NavLink>
            <NavLink to="/cluster">Cluster</NavLink>
            <NavLink to="/marketplace">Marketplace</NavLink>
            {session.viewer.admin && <NavLink to="/users">Users</NavLink>}
            <a href="/graphql">GraphiQL</a>
          </nav>
        )}
        <span className="spacer" />
        {session && (
          <span className="viewer" data-testid="viewer">
            {session.viewer.name} <span className="role">{session.viewer.admin ? "admin" : "user"}</span>
            {getToken() !== null && (
              <button type="button" className="link" onClick={() => setToken(null)}>Sign out</button>
            )}
          </span>
        )}
        {version && <span className="version">v{version}</span>}
      </header>
      <main>{children ?? <p className="muted">Loading…</p>}</main>
    </>
  );
}
