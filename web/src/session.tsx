// The signed-in viewer and the clients that act for them, shared by every page.
import { createContext, useContext } from "react";
import type { Clients } from "./lib/client";

export interface Viewer {
  id: string;
  name: string;
  admin: boolean;
  virtualClusters: string[];
}

export interface Session {
  viewer: Viewer;
  clients: Clients;
}

export const SessionContext = createContext<Session | null>(null);

export function useSession(): Session {
  const session = useContext(SessionContext);
  if (!session) throw new Error("useSession outside a signed-in page");
  return session;
}
