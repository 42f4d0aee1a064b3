// One time-series chart drawn by uPlot (a small canvas library, loaded only with the charts),
// with a legend of each line's latest figure as text and a CSV download of what it shows.
import { useEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { downloadText } from "../lib/download";
import { formatFigure, latest, toCsv, type ChartModel, type LineKind } from "../lib/metrics";

const USED_COLORS = ["#2563eb", "#16a34a"];
const STYLE: Record<Exclude<LineKind, "used">, { stroke: string; dash?: number[]; width: number }> = {
  request: { stroke: "#f59e0b", dash: [6, 4], width: 1.5 },
  limit: { stroke: "#dc2626", dash: [2, 3], width: 1.5 },
  low: { stroke: "rgba(37, 99, 235, 0.35)", width: 1 },
  high: { stroke: "rgba(37, 99, 235, 0.35)", width: 1 },
};
const MARK_COLOR = "#dc2626";

function colorOf(model: ChartModel, n: number): string {
  const line = model.lines[n];
  if (line && line.kind !== "used") return STYLE[line.kind].stroke;
  return USED_COLORS[model.lines.slice(0, n).filter((l) => l.kind === "used").length % USED_COLORS.length] ?? "#2563eb";
}

function options(model: ChartModel, width: number): uPlot.Options {
  const low = model.lines.findIndex((line) => line.kind === "low");
  const high = model.lines.findIndex((line) => line.kind === "high");
  return {
    width,
    height: 180,
    legend: { show: false },
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
    series: [
      {},
      ...model.lines.map((line, n) => {
        const style = line.kind === "used" ? { stroke: colorOf(model, n), width: 2 } : STYLE[line.kind];
        return { label: line.label, spanGaps: false, points: { show: false }, ...style };
      }),
    ],
    bands: low >= 0 && high >= 0 ? [{ series: [high + 1, low + 1], fill: "rgba(37, 99, 235, 0.12)" }] : [],
    axes: [
      {},
      { size: 80, values: (_u, splits) => splits.map((value) => formatFigure(value, model.unit)) },
    ],
    hooks: {
      draw: [
        (u) => {
          // an OOM kill: a red vertical line at its time
          const { ctx } = u;
          for (const mark of model.marks) {
            const x = u.valToPos(mark.at, "x", true);
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
            ctx.save();
            ctx.strokeStyle = MARK_COLOR;
            ctx.lineWidth = 2;
            ctx.beginPath();
            ctx.moveTo(x, u.bbox.top);
            ctx.lineTo(x, u.bbox.top + u.bbox.height);
            ctx.stroke();
            ctx.restore();
          }
          u.root.dataset.drawn = "1";
        },
      ],
    },
  };
}

function shape(model: ChartModel): string {
  return `${model.unit}|${model.lines.map((line) => line.label).join("|")}|${model.marks.map((m) => m.at).join("|")}`;
}

export function Chart({ model, name, testId }: { model: ChartModel; name: string; testId: string }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const plotShape = useRef("");

  useEffect(() => {
    const data = [model.xs, ...model.lines.map((line) => line.values)] as uPlot.AlignedData;
    const current = plot.current;
    if (current && plotShape.current === shape(model)) {
      current.setData(data);
      return;
    }
    // the effect runs after the figure's box is in the page
    const element = box.current;
    if (!element) return;
    current?.destroy();
    const width = Math.max(320, Math.min(720, element.clientWidth || 560));
    plot.current = new uPlot(options(model, width), data, element);
    plotShape.current = shape(model);
  }, [model]);

  useEffect(
    () => () => {
      plot.current?.destroy();
      plot.current = null;
    },
    [],
  );

  return (
    <figure className="chart" data-testid={testId} data-points={model.xs.length}>
      <figcaption>
        {model.title}{" "}
        <button
          type="button"
          className="link"
          onClick={() => downloadText(`${name}.csv`, toCsv(model), "text/csv")}
        >
          CSV
        </button>
      </figcaption>
      <div ref={box} className="plot" />
      <ul className="legend" data-testid="legend">
        {model.lines.map((line, n) => (
          <li key={line.label} data-line={line.label}>
            <span className="swatch" style={{ background: colorOf(model, n) }} /> {line.label}:{" "}
            <span className="figure">{formatFigure(latest(line.values) ?? line.level ?? null, model.unit)}</span>
          </li>
        ))}
        {model.marks.map((mark) => (
          <li key={mark.at} data-mark={mark.label}>
            <span className="swatch" style={{ background: MARK_COLOR }} /> {mark.label} at{" "}
            {new Date(mark.at * 1000).toLocaleString()}
          </li>
        ))}
        {model.xs.length === 0 && <li className="muted">No figures in this range.</li>}
      </ul>
    </figure>
  );
}
