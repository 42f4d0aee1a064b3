// The cluster: every node's capacity and what is free, and the virtual clusters' use.
import { useQuery } from "urql";
import { describeProblem } from "../lib/errors";
import { ClusterQuery } from "../queries";

interface Amount {
  cpu: number;
  memoryMB: number;
  gpu: number;
}

function amount(value: Amount | null | undefined): string {
  if (!value) return "—";
  return `${value.cpu} cpu, ${value.memoryMB} MB, ${value.gpu} gpu`;
}

export function ClusterPage() {
  const [{ data, error }] = useQuery({ query: ClusterQuery, requestPolicy: "network-only" });
  if (error) return <p className="error" role="alert">{describeProblem(error).message}</p>;
  if (!data) return <p className="muted">Loading…</p>;
  return (
    <section>
      <h1>Cluster</h1>
      <p className="muted">Backend: {data.cluster.backend ?? "none (this server only shows stored jobs)"}</p>
      <h2>Nodes</h2>
      <table data-testid="nodes">
        <thead>
          <tr>
            <th>Node</th>
            <th>Capacity</th>
            <th>Used</th>
            <th>Free</th>
            <th>Instances</th>
          </tr>
        </thead>
        <tbody>
          {data.cluster.nodes.map((node) => (
            <tr key={node.name}>
              <td>{node.name}</td>
              <td>{amount(node.capacity)}</td>
              <td>{amount(node.used)}</td>
              <td>{amount(node.free)}</td>
              <td>{node.instances}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <h2>Virtual clusters</h2>
      <table data-testid="virtual-clusters">
        <thead>
          <tr>
            <th>Name</th>
            <th>Quota</th>
            <th>Used</th>
            <th>Free</th>
            <th>Instances</th>
            <th>You may submit</th>
          </tr>
        </thead>
        <tbody>
          {data.virtualClusters.map((vc) => (
            <tr key={vc.name}>
              <td>{vc.name}</td>
              <td>{amount(vc.quota)}</td>
              <td>{amount(vc.used)}</td>
              <td>{amount(vc.free)}</td>
              <td>{vc.instances ?? "—"}</td>
              <td>{vc.canSubmit ? "yes" : "no"}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
