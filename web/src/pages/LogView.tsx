// One task instance's output: its tail first, then new output while it runs (follow), kept
// after it ended; download fetches the whole log.
import { useEffect, useRef, useState } from "react";
import { downloadText } from "../lib/download";
import { follow } from "../lib/live";
import { EMPTY_LOG, appendChunk, tailNote, trimTo, type LogBuffer } from "../lib/logbuffer";
import { TaskLogsSubscription } from "./LogView.operations";
import { useSession } from "../session";

export const TAIL_LINES = 1000;
const MAX_CHARS = 2_000_000;
const encoder = new TextEncoder();

export function LogView({
  jobId,
  jobName,
  taskRole,
  index,
  running,
}: {
  jobId: string;
  jobName: string;
  taskRole: string;
  index: number;
  running: boolean;
}) {
  const { clients } = useSession();
  const [log, setLog] = useState<LogBuffer>(EMPTY_LOG);
  const [following, setFollowing] = useState(true);
  const [status, setStatus] = useState<"loading" | "following" | "done" | "error">("loading");
  const [problem, setProblem] = useState<string | null>(null);
  const [downloading, setDownloading] = useState(false);
  const end = useRef(0);
  const started = useRef(false);
  const pre = useRef<HTMLPreElement>(null);

  useEffect(() => {
    setLog(EMPTY_LOG);
    end.current = 0;
    started.current = false;
  }, [jobId, taskRole, index]);

  const live = following && running;
  useEffect(() => {
    setStatus(live ? "following" : "loading");
    setProblem(null);
    const fromStart = !started.current;
    started.current = true;
    return follow(
      clients.ws,
      TaskLogsSubscription,
      {
        jobId,
        taskRole,
        index,
        follow: live,
        offset: fromStart ? 0 : end.current,
        tail: fromStart ? TAIL_LINES : null,
      },
      (data, variables) => {
        variables.offset = data.taskLogs.offset + encoder.encode(data.taskLogs.data).length;
        variables.tail = null;
      },
      {
        next(data) {
          const chunk = data.taskLogs;
          setLog((current) => {
            const next = trimTo(appendChunk(current, chunk.offset, chunk.data), MAX_CHARS);
            end.current = next.end;
            return next;
          });
        },
        error(message) {
          setStatus("error");
          setProblem(message);
        },
        complete() {
          setStatus((current) => (current === "error" ? current : "done"));
        },
      },
    );
  }, [clients, jobId, taskRole, index, live]);

  useEffect(() => {
    if (live && pre.current) pre.current.scrollTop = pre.current.scrollHeight;
  }, [log, live]);

  function download() {
    setDownloading(true);
    let whole: LogBuffer = EMPTY_LOG;
    follow(
      clients.ws,
      TaskLogsSubscription,
      { jobId, taskRole, index, follow: false, offset: 0, tail: null },
      (data, variables) => {
        variables.offset = data.taskLogs.offset + encoder.encode(data.taskLogs.data).length;
      },
      {
        next(data) {
          whole = appendChunk(whole, data.taskLogs.offset, data.taskLogs.data);
        },
        error(message) {
          setDownloading(false);
          setProblem(message);
        },
        complete() {
          setDownloading(false);
          downloadText(`${jobName}-${taskRole}-${index}.log`, whole.text);
        },
      },
    );
  }

  const note = tailNote(log);
  return (
    <section className="log" data-testid="log">
      <div className="log-bar">
        <h3>
          Log of {taskRole} #{index}
        </h3>
        <label>
          <input
            type="checkbox"
            name="follow"
            checked={live}
            disabled={!running}
            onChange={(event) => setFollowing(event.target.checked)}
          />
          Follow
        </label>
        <span className="muted" data-testid="log-status">
          {status === "following" ? "following live output" : running ? "" : "the instance has ended"}
        </span>
        <button type="button" onClick={download} disabled={downloading}>
          {downloading ? "Downloading…" : "Download"}
        </button>
      </div>
      {note && <p className="note" data-testid="log-tail-note">{note}</p>}
      {problem && <p className="error" role="alert">{problem}</p>}
      <pre ref={pre} data-testid="log-text">{log.text || (status === "loading" ? "Loading…" : "(no output yet)")}</pre>
    </section>
  );
}
