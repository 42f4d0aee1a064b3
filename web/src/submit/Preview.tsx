// The dry run's answer before submitting: the job as it will run (references expanded,
// parameters rendered, as protocol v2) and each instance's environment and ports.
import type { SubmitPageResolveMutation } from "../gql/graphql";

type Resolved = NonNullable<SubmitPageResolveMutation["resolveJob"]["job"]>;

/** Shown only while open: each instance's environment is long, and the page asks the server
 * for it only then (`open` is passed up so that it does). */
export function Preview({ job, open, onToggle }: { job: Resolved | null; open: boolean; onToggle: (open: boolean) => void }) {
  return (
    <details className="preview" data-testid="preview" open={open} onToggle={(event) => onToggle((event.target as HTMLDetailsElement).open)}>
      <summary>Preview: the resolved job and each instance's environment</summary>
      {open && !job && <p className="muted">The preview appears once the job has no problems.</p>}
      {open && job && (
        <>
          <p>
            {job.name} in virtual cluster {job.virtualCluster}
          </p>
          <pre data-testid="resolved-config">{job.config}</pre>
          {(job.taskRoles ?? []).map((role) =>
            role.instances.map((instance) => (
              <details key={`${role.name}-${instance.index}`} className="instance-env" data-instance-env={`${role.name}-${instance.index}`}>
                <summary>
                  {role.name} #{instance.index}{" "}
                  <span className="muted">
                    {instance.hostIp}
                    {instance.ports.map((port) => ` ${port.label}: ${port.ports.join(", ")}`).join(";")}
                  </span>
                </summary>
                {instance.environment.length === 0 ? (
                  <p className="muted">Not shown for this instance (see the warnings).</p>
                ) : (
                  <table className="env">
                    <tbody>
                      {instance.environment.map((variable) => (
                        <tr key={variable.name}>
                          <th>{variable.name}</th>
                          <td>
                            <code>{variable.value}</code>
                          </td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                )}
              </details>
            )),
          )}
        </>
      )}
    </details>
  );
}
