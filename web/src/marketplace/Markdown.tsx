// An item's description: Markdown rendered by react-markdown, with raw HTML left out (never
// rendered) and links only of safe schemes (its default URL transform).
import ReactMarkdown from "react-markdown";

export function Markdown({ text }: { text: string }) {
  return (
    <div className="markdown" data-testid="description">
      <ReactMarkdown skipHtml>{text}</ReactMarkdown>
    </div>
  );
}
