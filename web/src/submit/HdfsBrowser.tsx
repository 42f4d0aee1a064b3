// Browsing the viewer's simulated HDFS (the Docker simulator's `hdfs://` trees) for a
// prerequisite: from the default file system's root or a typed hdfs://host:port/ location,
// into folders and back up; picking a file or folder hands its hdfs://host:port/path URI on.
import { useState } from "react";
import { useQuery } from "urql";
import { describeProblem } from "../lib/errors";
import { formatBytes } from "../lib/format";
import { FileListingQuery } from "./HdfsBrowser.operations";

/** The folder holding `uri` (hdfs://host:port/a/b -> hdfs://host:port/a), or null at a root. */
export function parentOf(uri: string): string | null {
  const match = /^(hdfs:\/\/[^/]*)?(\/.*)$/.exec(uri);
  if (!match) return null;
  const [, root = "", path = "/"] = match;
  const trimmed = path.replace(/\/+$/, "");
  if (trimmed === "") return null;
  const up = trimmed.slice(0, trimmed.lastIndexOf("/"));
  return `${root}${up === "" ? "/" : up}`;
}

/** The last segment of a location's path, for naming what was picked ("" at a root). */
export function lastSegment(uri: string): string {
  const path = uri.replace(/^hdfs:\/\/[^/]*/, "").replace(/\/+$/, "");
  return path.slice(path.lastIndexOf("/") + 1);
}

export function HdfsBrowser({ label, onPick }: { label: string; onPick: (uri: string) => void }) {
  const [open, setOpen] = useState(false);
  const [at, setAt] = useState("/");
  const [typed, setTyped] = useState("/");
  const [{ data, error, fetching }] = useQuery({
    query: FileListingQuery,
    variables: { uri: at },
    pause: !open,
    requestPolicy: "network-only",
  });
  if (!open) {
    return (
      <button type="button" className="pick" onClick={() => setOpen(true)}>
        Browse HDFS for {label}
      </button>
    );
  }
  const go = (uri: string) => {
    setAt(uri);
    setTyped(uri);
  };
  const pick = (uri: string) => {
    onPick(uri);
    setOpen(false);
  };
  const listing = data?.fileListing;
  const here = listing?.uri ?? null;
  const up = here ? parentOf(here) : null;
  return (
    <div className="picker" role="dialog" aria-label={`Browse HDFS for ${label}`} data-hdfs-browser={here ?? at}>
      <form
        className="picker-bar"
        onSubmit={(event) => {
          event.preventDefault();
          go(typed.trim() || "/");
        }}
      >
        <input
          aria-label={`HDFS location for ${label}`}
          placeholder="/path, or hdfs://host:port/path"
          value={typed}
          onChange={(event) => setTyped(event.target.value)}
        />
        <button type="submit">Go</button>
        <button type="button" className="link" onClick={() => setOpen(false)}>
          Close
        </button>
      </form>
      {error && <p className="error">{describeProblem(error).message}</p>}
      {listing?.errors.map((problem, n) => (
        <p key={n} className="error">
          {problem.message}
        </p>
      ))}
      {here && (
        <div className="picker-bar">
          <code>{here}</code>
          {up && (
            <button type="button" onClick={() => go(up)}>
              Up
            </button>
          )}
          {listing?.directory && parentOf(here) !== null && (
            <button type="button" onClick={() => pick(here)}>
              Use this folder
            </button>
          )}
        </div>
      )}
      {!fetching && listing && listing.errors.length === 0 && listing.entries.length === 0 && <p className="muted">Nothing here.</p>}
      <ul className="picker-items">
        {listing?.entries.map((entry) => (
          <li key={entry.uri} data-entry={entry.name}>
            <div>
              {entry.directory ? (
                <button type="button" className="link" onClick={() => go(entry.uri)}>
                  {entry.name}/
                </button>
              ) : (
                <strong>{entry.name}</strong>
              )}{" "}
              <span className="muted">{formatBytes(entry.size)}</span>
            </div>
            <button type="button" onClick={() => pick(entry.uri)}>
              Use {entry.name}
            </button>
          </li>
        ))}
      </ul>
    </div>
  );
}
