// The users, for admins: who they are, add one (their token is shown once), give one a new
// token (all old ones stop working at once, open connections included), or remove one (their
// jobs run on and stay under their name; their items stay).
import { useState } from "react";
import { useMutation, useQuery } from "urql";
import { copyText } from "../lib/download";
import { describeProblem } from "../lib/errors";
import { formatTime } from "../lib/format";
import { useSession } from "../session";
import { AddUserMutation, RemoveUserMutation, ResetTokenMutation, UsersQuery } from "./UsersPage.operations";

interface Issued {
  name: string;
  token: string;
  why: string;
}

export function UsersPage() {
  const { viewer } = useSession();
  const [removed, setRemoved] = useState(false);
  const [{ data, error }, refetch] = useQuery({ query: UsersQuery, variables: { removed }, requestPolicy: "network-only" });
  const [issued, setIssued] = useState<Issued | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const [confirming, setConfirming] = useState<string | null>(null);
  const [, reset] = useMutation(ResetTokenMutation);
  const [, remove] = useMutation(RemoveUserMutation);
  if (!viewer.admin) return <p className="error" role="alert">Only an admin may manage users.</p>;
  if (error) return <p className="error" role="alert">{describeProblem(error).message}</p>;
  const reload = () => refetch({ requestPolicy: "network-only" });
  const failed = (errors: { message: string }[] | undefined, failure: Parameters<typeof describeProblem>[0] | undefined) =>
    setProblem(failure ? describeProblem(failure).message : errors?.[0]?.message ?? "it did not work");
  const newToken = async (name: string) => {
    const result = await reset({ name });
    const payload = result.data?.resetUserToken;
    if (payload?.token) {
      setProblem(null);
      setIssued({ name, token: payload.token, why: "given a new token" });
    } else failed(payload?.errors, result.error);
  };
  const removeUser = async (name: string) => {
    setConfirming(null);
    const result = await remove({ name });
    const payload = result.data?.removeUser;
    if (payload?.user) {
      setProblem(null);
      reload();
    } else failed(payload?.errors, result.error);
  };
  return (
    <section className="users-page">
      <h1>Users</h1>
      <p className="muted">
        Everyone may submit to the virtual cluster <code>default</code>. A new token replaces all of a user's old ones; removing a
        user ends their tokens at once, open connections included. Their jobs run on under their name and their items stay.
      </p>
      <AddUser
        onAdded={(name, token) => {
          setProblem(null);
          setIssued({ name, token, why: "added" });
          reload();
        }}
        onProblem={setProblem}
      />
      {issued && <IssuedToken issued={issued} onDone={() => setIssued(null)} />}
      {problem && <p className="error" role="alert">{problem}</p>}
      <label className="inline">
        <input type="checkbox" checked={removed} onChange={(event) => setRemoved(event.target.checked)} /> Show removed users
      </label>
      {!data ? (
        <p className="muted">Loading…</p>
      ) : (
        <table data-testid="users">
          <thead>
            <tr>
              <th>Name</th>
              <th>Admin</th>
              <th>Virtual clusters</th>
              <th>Added</th>
              <th>Removed</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {data.users.map((user) => (
              <tr key={user.id} data-user={user.name}>
                <td>{user.name}</td>
                <td>{user.admin ? "yes" : "no"}</td>
                <td>{user.virtualClusters.join(", ") || "—"}</td>
                <td>{formatTime(user.createdAt)}</td>
                <td>{user.removedAt ? formatTime(user.removedAt) : "—"}</td>
                <td>
                  {!user.removedAt && (
                    <>
                      <button
                        type="button"
                        // urql resolves a failed request into result.error instead of rejecting: nothing to catch
                        onClick={() => void newToken(user.name)}
                      >
                        New token
                      </button>{" "}
                      {user.name !== viewer.name &&
                        (confirming === user.name ? (
                          <span role="alertdialog" aria-label={`Confirm removing ${user.name}`}>
                            Remove {user.name}?{" "}
                            <button
                              type="button"
                              className="danger"
                              // urql resolves a failed request into result.error instead of rejecting: nothing to catch
                              onClick={() => void removeUser(user.name)}
                            >
                              Yes, remove
                            </button>{" "}
                            <button type="button" onClick={() => setConfirming(null)}>
                              Cancel
                            </button>
                          </span>
                        ) : (
                          <button type="button" className="danger" onClick={() => setConfirming(user.name)}>
                            Remove
                          </button>
                        ))}
                    </>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function AddUser({ onAdded, onProblem }: { onAdded: (name: string, token: string) => void; onProblem: (message: string) => void }) {
  const [name, setName] = useState("");
  const [admin, setAdmin] = useState(false);
  const [clusters, setClusters] = useState("");
  const [adding, add] = useMutation(AddUserMutation);
  const addUser = async () => {
    const virtualClusters = clusters
      .split(",")
      .map((part) => part.trim())
      .filter(Boolean);
    const result = await add({ input: { name: name.trim(), admin, virtualClusters } });
    const payload = result.data?.addUser;
    if (payload?.token && payload.user) {
      onAdded(payload.user.name, payload.token);
      setName("");
      setAdmin(false);
      setClusters("");
    } else {
      onProblem(result.error ? describeProblem(result.error).message : payload?.errors[0]?.message ?? "the user was not added");
    }
  };
  return (
    <form
      className="add-user row"
      onSubmit={(event) => {
        event.preventDefault();
        // urql resolves a failed request into result.error instead of rejecting: nothing to catch
        void addUser();
      }}
    >
      <label>
        New user
        <input name="user-name" value={name} onChange={(event) => setName(event.target.value)} required />
      </label>
      <label>
        Virtual clusters (comma-separated)
        <input name="user-vcs" value={clusters} onChange={(event) => setClusters(event.target.value)} />
      </label>
      <label className="inline">
        <input type="checkbox" checked={admin} onChange={(event) => setAdmin(event.target.checked)} /> admin
      </label>
      <button type="submit" className="primary" disabled={adding.fetching}>
        Add user
      </button>
    </form>
  );
}

function IssuedToken({ issued, onDone }: { issued: Issued; onDone: () => void }) {
  const [copied, setCopied] = useState(false);
  return (
    <div className="note" role="status" data-testid="issued-token">
      {issued.name} was {issued.why}. Their token, shown only now: <code data-testid="token">{issued.token}</code>{" "}
      {/* copyText settles false on a clipboard failure rather than rejecting */}
      <button type="button" onClick={() => void copyText(issued.token).then(setCopied)}>
        {copied ? "Copied" : "Copy"}
      </button>{" "}
      <button type="button" className="link" onClick={onDone}>
        Done
      </button>
    </div>
  );
}
