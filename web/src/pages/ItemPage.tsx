// A marketplace item, as a job's prerequisites link to it (a fuller marketplace comes later).
import { useParams } from "react-router-dom";
import { useQuery } from "urql";
import { describeProblem } from "../lib/errors";
import { formatTime } from "../lib/format";
import { MarketplaceItemQuery } from "../queries";

export function ItemPage() {
  const id = decodeURIComponent(useParams().id ?? "");
  const [{ data, error }] = useQuery({ query: MarketplaceItemQuery, variables: { id } });
  if (error) return <p className="error" role="alert">{describeProblem(error).message}</p>;
  if (!data) return <p className="muted">Loading…</p>;
  const item = data.marketplaceItem;
  if (!item) return <p className="error" role="alert">There is no marketplace item with that ID that you may see.</p>;
  return (
    <section>
      <h1>
        {item.name} <span className="muted">{item.version}</span>
      </h1>
      <p>
        {item.type} by {item.owner.name}, updated {formatTime(item.updatedAt)}; {item.stars} stars, {item.submits} submits
        {item.tags.length > 0 && <>; tags {item.tags.join(", ")}</>}
      </p>
      {item.summary && <p>{item.summary}</p>}
      {item.description && <pre className="description">{item.description}</pre>}
      <h2>Content</h2>
      <pre>{item.content}</pre>
    </section>
  );
}
