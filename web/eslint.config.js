import js from "@eslint/js";
import reactHooks from "eslint-plugin-react-hooks";
import globals from "globals";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["src/gql/**", "node_modules/**"] },
  js.configs.recommended,
  // type-aware: the TypeScript program (tsconfig.json) tells the rules what each value is
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
  },
  {
    files: ["**/*.{ts,tsx}"],
    languageOptions: { globals: globals.browser },
    plugins: { "react-hooks": reactHooks },
    rules: {
      "react-hooks/rules-of-hooks": "error",
      "react-hooks/exhaustive-deps": "error",
      // `onClick={() => setOpen(true)}` passes the setter's void on deliberately: React's handler idiom
      "@typescript-eslint/no-confusing-void-expression": ["error", { ignoreArrowShorthand: true }],
      // a number reads the same in a message as String(number); other types still need converting
      "@typescript-eslint/restrict-template-expressions": ["error", { allowNumber: true }],
    },
  },
  {
    // off in tests only: a test's `!` on what it just built fails that test at once, the check it wants
    files: ["**/*.test.ts"],
    rules: { "@typescript-eslint/no-non-null-assertion": "off" },
  },
  {
    // the config files outside tsconfig.json's program are linted without types
    files: ["**/*.js"],
    ...tseslint.configs.disableTypeChecked,
  },
);
