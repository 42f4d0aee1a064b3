// The YAML editor: CodeMirror 6 with YAML highlighting and the server's problems as lint marks.
// The text is owned by the page; the editor reports what is typed and takes what forms write.
import { yaml } from "@codemirror/lang-yaml";
import { lintGutter, setDiagnostics, type Diagnostic } from "@codemirror/lint";
import { EditorView, basicSetup } from "codemirror";
import { useEffect, useRef } from "react";

export interface Mark {
  from: number;
  to: number;
  severity: "error" | "warning";
  message: string;
}

export interface EditorHandle {
  /** Put the cursor on a line and scroll it into view. */
  reveal(from: number): void;
}

export function Editor({
  value,
  onChange,
  marks,
  marksFor,
  handle,
  id,
  label = "Job YAML",
}: {
  value: string;
  onChange: (text: string) => void;
  marks: Mark[];
  /** The text the marks were computed for: they are shown only while it is the editor's. */
  marksFor: string | null;
  handle?: React.RefObject<EditorHandle | null>;
  /** The editable element's id, for a <label htmlFor> (and tests) to find it. */
  id?: string;
  /** Its accessible name. */
  label?: string;
}) {
  const host = useRef<HTMLDivElement>(null);
  const view = useRef<EditorView | null>(null);
  const changed = useRef(onChange);
  useEffect(() => {
    changed.current = onChange;
  }, [onChange]);

  useEffect(() => {
    if (!host.current) return;
    const created = new EditorView({
      parent: host.current,
      doc: value,
      extensions: [
        basicSetup,
        yaml(),
        EditorView.lineWrapping, // long commands wrap: no line loses its start to a sideways scroll
        lintGutter(),
        EditorView.updateListener.of((update) => {
          if (update.docChanged) changed.current(update.state.doc.toString());
        }),
        EditorView.contentAttributes.of({ "aria-label": label, "data-testid": "yaml-editor", ...(id ? { id } : {}) }),
      ],
    });
    view.current = created;
    return () => {
      created.destroy();
      view.current = null;
    };
    // the editor is made once; later values arrive through the effect below
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);

  useEffect(() => {
    const current = view.current;
    if (!current) return;
    const text = current.state.doc.toString();
    if (text === value) return;
    current.dispatch({ changes: { from: 0, to: text.length, insert: value } });
    // a text from elsewhere (an import, a form) is shown from its first column
    current.scrollDOM.scrollLeft = 0;
  }, [value]);

  useEffect(() => {
    const current = view.current;
    if (!current) return;
    const text = current.state.doc.toString();
    if (marksFor !== null && marksFor !== text) return; // stale: wait for the next check
    const length = text.length;
    const diagnostics: Diagnostic[] = marks.map((mark) => ({
      from: Math.min(mark.from, length),
      to: Math.min(Math.max(mark.to, mark.from), length),
      severity: mark.severity,
      message: mark.message,
    }));
    current.dispatch(setDiagnostics(current.state, diagnostics));
  }, [marks, marksFor]);

  useEffect(() => {
    if (!handle) return;
    handle.current = {
      reveal(from: number) {
        const current = view.current;
        if (!current) return;
        const at = Math.min(from, current.state.doc.length);
        current.dispatch({ selection: { anchor: at }, effects: EditorView.scrollIntoView(at, { y: "center" }) });
        current.focus();
      },
    };
  }, [handle]);

  return <div className="yaml-editor" ref={host} />;
}
