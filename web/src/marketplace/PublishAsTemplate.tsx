// The job page's way into publishing: its owner (or an admin) publishes the job's config as a
// marketplace template.
import { Link } from "react-router-dom";
import { useSession } from "../session";

export function PublishAsTemplate({ job }: { job: { id: string; user: { id: string } } }) {
  const { viewer } = useSession();
  if (!viewer.admin && viewer.id !== job.user.id) return null;
  return (
    <Link className="button" to={`/marketplace/publish?${new URLSearchParams({ job: job.id }).toString()}`}>
      Publish as template
    </Link>
  );
}
