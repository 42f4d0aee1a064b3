// The cluster: every node's capacity and what is free, and the virtual clusters' use.
import { useQuery } from "urql";
import { describeProblem } from "../lib/errors";
import { formatFigure } from "../lib/metrics";
import { ClusterQuery, ClusterUsageQuery } from "./ClusterPage.operations";

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
      <NodeUsageView />
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

type NodeUsage = NonNullable<ReturnType<typeof useNodeUsage>["data"]>["cluster"]["usage"][number];

function useNodeUsage() {
  return useQuery({ query: ClusterUsageQuery, requestPolicy: "network-only" })[0];
}

/** A bar: how much of the capacity is allocated (light) and used (dark), with the figures. */
function Bar({ label, allocated, used, capacity, unit }: {
  label: string;
  allocated: number | null;
  used: number;
  capacity: number | null;
  unit: "cores" | "bytes";
}) {
  const share = (value: number | null) => (capacity && value !== null ? `${Math.min(100, (100 * value) / capacity)}%` : "0%");
  const amount = (value: number | null) => (value === null ? "—" : unit === "cores" ? `${value}` : formatFigure(value, "bytes"));
  return (
    <div className="usage-bar" data-bar={label}>
      <div className="bar" aria-hidden="true">
        <div className="allocated" style={{ width: share(allocated) }} />
        <div className="used" style={{ width: share(used) }} />
      </div>
      <span className="figures">
        {unit === "cores"
          ? `${formatFigure(used, "cores")} used, ${amount(allocated)} of ${amount(capacity)} allocated`
          : `${formatFigure(used, "bytes")} used, ${amount(allocated)} of ${amount(capacity)} allocated`}
      </span>
    </div>
  );
}

function GpuCells({ node }: { node: NodeUsage }) {
  if (!node.gpus) return <span className="muted">none</span>;
  const held = new Set(node.gpusAllocated);
  return (
    <span className="gpu-cells" data-testid="gpu-cells">
      {Array.from({ length: node.gpus }, (_, index) => {
        const allocated = held.has(index);
        const title = `GPU ${index}: ${allocated ? "allocated" : "free"}${
          allocated && node.gpusReal && node.gpuUtilization !== null && node.gpuUtilization !== undefined
            ? `, ${Math.round(node.gpuUtilization * 100)}% used`
            : ""
        }`;
        return (
          <span
            key={index}
            className={`gpu-cell${allocated ? " allocated" : ""}`}
            data-gpu={index}
            data-allocated={allocated ? "1" : "0"}
            title={title}
            style={
              allocated && node.gpusReal && node.gpuUtilization != null
                ? { background: `rgba(22, 163, 74, ${0.25 + 0.75 * node.gpuUtilization})` }
                : undefined
            }
          >
            {index}
          </span>
        );
      })}{" "}
      {node.gpuNote ? (
        <span className="muted">({node.gpuNote})</span>
      ) : (
        !node.gpusReal && <span className="muted">(simulated)</span>
      )}
    </span>
  );
}

/** Each node's allocation and what its instances use now, as far as the server lets the viewer
 * see (admins every node, others the nodes running their own jobs). */
function NodeUsageView() {
  const { data, error } = useNodeUsage();
  if (error) return <p className="error">{describeProblem(error).message}</p>;
  if (!data) return null;
  return (
    <>
      <h2>Node use</h2>
      <p className="muted" data-testid="usage-source">
        Measured: {data.cluster.usageSource}
      </p>
      <table data-testid="node-usage" className="node-usage">
        <thead>
          <tr>
            <th>Node</th>
            <th>CPU</th>
            <th>Memory</th>
            <th>GPUs</th>
            <th>Instances</th>
          </tr>
        </thead>
        <tbody>
          {data.cluster.usage.map((node) => (
            <tr key={node.name} data-node={node.name}>
              <td>{node.name}</td>
              <td>
                <Bar label="cpu" allocated={node.cpuAllocated ?? null} used={node.cpuUsedCores} capacity={node.cpuCapacity ?? null} unit="cores" />
              </td>
              <td>
                <Bar
                  label="memory"
                  allocated={node.memoryAllocatedBytes ?? null}
                  used={node.memoryUsedBytes}
                  capacity={node.memoryCapacityBytes ?? null}
                  unit="bytes"
                />
              </td>
              <td>
                <GpuCells node={node} />
              </td>
              <td>{node.instances}</td>
            </tr>
          ))}
          {data.cluster.usage.length === 0 && (
            <tr>
              <td colSpan={5} className="muted">
                No node to show.
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </>
  );
}
