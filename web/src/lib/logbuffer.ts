// A task instance's log as the page holds it: chunks placed by their byte offset, so a chunk
// delivered again after a reconnection is not shown twice, and a note when only the tail of
// a long log is shown.

export interface LogBuffer {
  /** Byte offset in the instance's log where `text` begins (above 0: only the tail is shown). */
  start: number;
  /** Byte offset just past the text held. */
  end: number;
  text: string;
}

export const EMPTY_LOG: LogBuffer = { start: 0, end: 0, text: "" };

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The buffer with a chunk (at byte `offset`) added; the overlap with what is held is dropped. */
export function appendChunk(buffer: LogBuffer, offset: number, data: string): LogBuffer {
  const bytes = encoder.encode(data);
  if (buffer.text === "" && buffer.end === 0) {
    return { start: offset, end: offset + bytes.length, text: data };
  }
  const chunkEnd = offset + bytes.length;
  if (chunkEnd <= buffer.end) return buffer;
  const skip = Math.max(0, buffer.end - offset);
  const added = skip === 0 ? data : decoder.decode(bytes.subarray(skip));
  return { start: buffer.start, end: chunkEnd, text: buffer.text + added };
}

/** Keep at most `limit` characters, cut at a line start; `start` moves on with it. */
export function trimTo(buffer: LogBuffer, limit: number): LogBuffer {
  if (buffer.text.length <= limit) return buffer;
  let cut = buffer.text.length - limit;
  const newline = buffer.text.indexOf("\n", cut);
  if (newline >= 0) cut = newline + 1;
  const dropped = encoder.encode(buffer.text.slice(0, cut)).length;
  return { start: buffer.start + dropped, end: buffer.end, text: buffer.text.slice(cut) };
}

/** What the page says above a log that is not shown from its first byte. */
export function tailNote(buffer: LogBuffer): string | null {
  if (buffer.start <= 0) return null;
  return `This log is long: only its last part is shown (the first ${buffer.start.toLocaleString("en")} bytes are left out). Download it for the whole log.`;
}
