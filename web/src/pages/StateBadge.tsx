export function StateBadge({ state }: { state: string }) {
  return (
    <span className={`state state-${state.toLowerCase()}`} data-state={state}>
      {state}
    </span>
  );
}
