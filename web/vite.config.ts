import { resolve } from "node:path";
import react from "@vitejs/plugin-react";
import { defineConfig } from "vitest/config";

// Two pages from one build: the app (index.html) and GraphiQL (graphiql.html), which the
// server answers browser GETs of /graphql with. The output lands inside the Python package so
// a wheel carries it (pyproject.toml declares it as package data).
export default defineConfig({
  plugins: [react()],
  // GraphiQL's editor (monaco) starts its workers from modules that split into chunks, which
  // Vite 6's default worker format (iife) cannot bundle; module workers can.
  worker: { format: "es" },
  build: {
    outDir: resolve(import.meta.dirname, "../server/webui"),
    emptyOutDir: true,
    chunkSizeWarningLimit: 4096,
    rollupOptions: {
      onwarn(warning, warn) {
        // graphiql's modules carry React Compiler directives that bundling drops harmlessly
        if (warning.code === "MODULE_LEVEL_DIRECTIVE") return;
        warn(warning);
      },
      input: {
        main: resolve(import.meta.dirname, "index.html"),
        graphiql: resolve(import.meta.dirname, "graphiql.html"),
      },
    },
  },
  server: {
    proxy: { "/graphql": { target: "http://127.0.0.1:8000", ws: true } },
  },
  test: {
    environment: "node",
    include: ["src/**/*.test.ts"],
  },
});
