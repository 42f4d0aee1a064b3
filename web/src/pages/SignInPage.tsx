// Sign in with a token from `paigraph users add NAME`; it is kept in this browser.
import { useState } from "react";
import { setToken } from "../lib/auth";

export function SignInPage({ problem }: { problem: string | null }) {
  const [value, setValue] = useState("");
  return (
    <section className="signin">
      <h1>Sign in</h1>
      {problem && <p className="error" role="alert">{problem}</p>}
      <form
        onSubmit={(event) => {
          event.preventDefault();
          setToken(value);
        }}
      >
        <label>
          Token
          <input
            name="token"
            type="password"
            autoComplete="off"
            value={value}
            onChange={(event) => setValue(event.target.value)}
            placeholder="from `paigraph users add NAME`"
          />
        </label>
        <button type="submit" disabled={!value.trim()}>Sign in</button>
      </form>
      <p className="muted">The token is kept in this browser until you sign out.</p>
    </section>
  );
}
