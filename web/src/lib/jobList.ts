// The rows of a jobs list: the jobs told since the list was read (newest first), then the
// jobs the reading itself returned. A job can be in both: jobsChanged resumes from the
// reading's cursor, and two readings with no change between them share that cursor, so a job
// told to one reading may come back listed by the next. Each job is one row, the listed one.
interface Row {
  id: string;
}

export function listRows<T extends Row>(told: readonly T[], listed: readonly T[]): T[] {
  const listedIds = new Set(listed.map((row) => row.id));
  return [...told.filter((row) => !listedIds.has(row.id)), ...listed];
}
