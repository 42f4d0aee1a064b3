import type { CodegenConfig } from "@graphql-codegen/cli";

// Typed operations from the server's schema: a query that asks for a field the schema lacks
// fails `npm run build` here, before any browser sees it.
const config: CodegenConfig = {
  schema: "../schema.graphql",
  documents: ["src/**/*.{ts,tsx}", "!src/gql/**/*"],
  ignoreNoDocuments: false,
  generates: {
    "./src/gql/": {
      preset: "client",
      presetConfig: { fragmentMasking: false },
      config: {
        useTypeImports: true,
        enumsAsTypes: true,
        scalars: { DateTime: "string", JSON: "unknown" },
      },
    },
  },
};

export default config;
