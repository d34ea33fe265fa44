// Test fixtures name only the fields a test is about (the functions under test read every
// field defensively); `partial<T>(...)` types such a fixture as the whole document type,
// so the rest of each test is checked against the generated types (src/types.ts).

export type Fixture<T> = T extends (infer U)[]
  ? Fixture<U>[]
  : T extends object
    ? { [K in keyof T]?: Fixture<T[K]> | null }
    : T;

export function partial<T>(value: Fixture<T>): T {
  return value as T;
}
