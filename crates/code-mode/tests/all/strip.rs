//! The TypeScript stripper: type syntax becomes spaces (line breaks kept), plain JavaScript
//! comes back byte-identical, strings/templates/comments/regexes are never touched, and
//! constructs needing code generation are refused by name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_code_mode::strip_types;
use pretty_assertions::assert_eq;

/// Strips `ts` and checks the result against `js` with runs of spaces collapsed, plus the
/// position invariant: same length in characters, same line breaks.
fn check(ts: &str, js: &str) {
    let out = strip_types(ts).unwrap_or_else(|e| panic!("{ts}: {e}"));
    assert_eq!(out.chars().count(), ts.chars().count(), "length of {ts:?}");
    let breaks = |s: &str| s.char_indices().filter(|(_, c)| *c == '\n').count();
    assert_eq!(breaks(&out), breaks(ts), "line breaks of {ts:?}");
    for (a, b) in out.chars().zip(ts.chars()) {
        assert!(
            a == b || a == ' ',
            "{ts:?} changed {b:?} into {a:?}: {out:?}"
        );
    }
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    assert_eq!(squash(&out), squash(js), "stripping {ts:?}");
}

/// Plain JavaScript: byte-identical.
fn same(js: &str) {
    assert_eq!(strip_types(js).unwrap(), js, "plain JavaScript changed");
}

#[test]
fn annotations_on_variables_params_and_returns() {
    let cases = [
        ("let x: number = 1;", "let x = 1;"),
        (
            "const s: string = 'a', n: number = 2;",
            "const s = 'a', n = 2;",
        ),
        ("let u: string | undefined;", "let u;"),
        (
            "const a: Array<Map<string, number[]>> = [];",
            "const a = [];",
        ),
        (
            "const o: { a: number; b?: string } = { a: 1 };",
            "const o = { a: 1 };",
        ),
        (
            "const t: [number, string] = [1, 'a'];",
            "const t = [1, 'a'];",
        ),
        (
            "const f: (a: number) => string = (a) => String(a);",
            "const f = (a) => String(a);",
        ),
        ("let k: keyof typeof obj;", "let k;"),
        (
            "let r: Record<string, { n: number }[]> = {};",
            "let r = {};",
        ),
        ("let m: 'a' | 'b' | -1 = 'a';", "let m = 'a';"),
        ("let tl: `id-${string}` = `id-${n}`;", "let tl = `id-${n}`;"),
        (
            "function f(a: number, b?: string): void {}",
            "function f(a, b) {}",
        ),
        (
            "function g(a: number = 1, ...rest: string[]): number[] { return [] }",
            "function g(a = 1, ...rest) { return [] }",
        ),
        (
            "async function h(): Promise<void> {}",
            "async function h() {}",
        ),
        (
            "function id<T extends object = {}>(x: T): T { return x }",
            "function id(x) { return x }",
        ),
        (
            "function isS(x: unknown): x is string { return typeof x === 'string' }",
            "function isS(x) { return typeof x === 'string' }",
        ),
        (
            "const cb = function (err: Error | null, data?: Buffer): void {};",
            "const cb = function (err, data) {};",
        ),
        (
            "try { f() } catch (e: unknown) { g(e) }",
            "try { f() } catch (e) { g(e) }",
        ),
        (
            "for (let i: number = 0; i < n; i++) {}",
            "for (let i = 0; i < n; i++) {}",
        ),
        ("let x!: number;", "let x;"),
        ("let\n  y: number\n  = 2", "let y = 2"),
        ("let z:\n  | 'a'\n  | 'b' = 'a'", "let z = 'a'"),
        (
            "const { a, b }: { a: number; b: string } = o;",
            "const { a, b } = o;",
        ),
        (
            "const [p, q]: [number, number] = pair;",
            "const [p, q] = pair;",
        ),
        (
            "function f(this: Window, a: number) {}",
            "function f( a) {}",
        ),
        (
            "function f(cb: (err: Error) => void): () => void { return cb }",
            "function f(cb) { return cb }",
        ),
    ];
    for (ts, js) in cases {
        check(ts, js);
    }
}

#[test]
fn arrow_functions() {
    let cases = [
        (
            "const f = (x: number): number => x * 2;",
            "const f = (x) => x * 2;",
        ),
        (
            "const g = async (p: string): Promise<string[]> => [p];",
            "const g = async (p) => [p];",
        ),
        (
            "xs.map((x: Item, i: number) => x.id + i)",
            "xs.map((x, i) => x.id + i)",
        ),
        ("const h = <T,>(x: T): T => x;", "const h = (x) => x;"),
        (
            "const k = <T extends { id: string }>(xs: T[]) => xs;",
            "const k = (xs) => xs;",
        ),
        (
            "const o = ({ a, b = 2 }: Opts = {}): {a: number} => ({ a });",
            "const o = ({ a, b = 2 } = {}) => ({ a });",
        ),
        ("const p = (a?: number, b?) => a;", "const p = (a, b) => a;"),
        (
            "const q = (x: unknown): x is string => typeof x === 'string';",
            "const q = (x) => typeof x === 'string';",
        ),
        (
            "run(async (): Promise<void> => { await go() })",
            "run(async () => { await go() })",
        ),
        (
            "const r = (x: number) =>\n  x > 0 ? 'pos' : 'neg';",
            "const r = (x) => x > 0 ? 'pos' : 'neg';",
        ),
    ];
    for (ts, js) in cases {
        check(ts, js);
    }
}

#[test]
fn assertions_and_generic_calls() {
    let cases = [
        ("const n = v as number;", "const n = v;"),
        ("const c = ['a', 'b'] as const;", "const c = ['a', 'b'];"),
        ("const d = { x: 1 } satisfies Rec;", "const d = { x: 1 };"),
        ("const e = (a as unknown as B).c;", "const e = (a).c;"),
        (
            "const f = obj!.x! + arr[0]!.y;",
            "const f = obj.x + arr[0].y;",
        ),
        ("const g = map.get(k)!;", "const g = map.get(k);"),
        (
            "const m = new Map<string, number[]>();",
            "const m = new Map();",
        ),
        ("const s = new Set<string>(xs);", "const s = new Set(xs);"),
        (
            "const r = await tools.read<Out>({ file_path: 'a' });",
            "const r = await tools.read({ file_path: 'a' });",
        ),
        ("const y = <any>x;", "const y = x;"),
        ("if ((x as any).ok) {}", "if ((x).ok) {}"),
        (
            "const lines = (out as { lines: { text: string }[] }).lines;",
            "const lines = (out).lines;",
        ),
        ("f(x as Record<string, unknown>, y)", "f(x, y)"),
    ];
    for (ts, js) in cases {
        check(ts, js);
    }
}

#[test]
fn declarations_vanish() {
    let cases = [
        (
            "interface A { a: number; b(): void }\nconst x = 1;",
            "const x = 1;",
        ),
        (
            "interface B<T> extends A, C<T> {\n  x: T;\n}\nlog(1)",
            "log(1)",
        ),
        ("type T = string | number;\nlet a = 1", "let a = 1"),
        (
            "type U<K> = { [P in keyof K]?: K[P] }\nlet a = 1",
            "let a = 1",
        ),
        (
            "type C<T> = T extends string ? 'str' : 'other';\nf()",
            "f()",
        ),
        ("type F = (a: number) => void\nf()", "f()"),
        ("declare const g: number;\nf()", "f()"),
        ("declare function h(a: string): void\nf()", "f()"),
        ("declare global { interface W { x: 1 } }\nf()", "f()"),
        ("import type { X } from './x';\nf()", "f()"),
        (
            "function o(a: string): void;\nfunction o(a: any) { return a }",
            "function o(a) { return a }",
        ),
        ("if (x) { type L = 1; g() }", "if (x) { g() }"),
    ];
    for (ts, js) in cases {
        check(ts, js);
    }
}

#[test]
fn classes() {
    let cases = [
        (
            "class A<T> extends B<T> implements C, D<T> {\n  private x: number = 1;\n  readonly y?: string;\n  static z: T[] = [];\n  protected constructor(a: number) { super(); }\n  public get v(): number { return this.x }\n  m<U>(u: U): U { return u }\n}",
            "class A extends B {\n x = 1;\n y;\n static z = [];\n constructor(a) { super(); }\n get v() { return this.x }\n m(u) { return u }\n}",
        ),
        ("class E { declare f: number; g = 1 }", "class E { g = 1 }"),
        (
            "abstract class F { abstract m(): void; n() {} }",
            "class F { n() {} }",
        ),
        (
            "class G { h!: string; i = a ? b : c; j: number }",
            "class G { h; i = a ? b : c; j }",
        ),
        (
            "class H { k = (e: Ev): void => { go(e) }\n l: string = 'x' }",
            "class H { k = (e) => { go(e) }\n l = 'x' }",
        ),
        ("class I { opt?(): void {} }", "class I { opt() {} }"),
        (
            "class J { [key: string]: unknown;\n  [k] = 1; m() {} }",
            "class J {\n [k] = 1; m() {} }",
        ),
    ];
    for (ts, js) in cases {
        check(ts, js);
    }
}

#[test]
fn javascript_that_looks_like_typescript_is_untouched() {
    let cases = [
        "const v = a ? b : c;",
        "const w = a ? (b) : c;",
        "const n = a ? b ? 1 : 2 : 3;",
        "const o = { a: 1, b: { c: x ? 1 : 2 }, [k]: 3, 'd-e': f(g) };",
        "outer: for (const x of xs) { inner: for (;;) { continue outer; } }",
        "switch (k) { case 1: f(); break; case 'a': { g() } default: h(); }",
        "if (x < y > z) {}",
        "const cmp = a < b && c > d;",
        "const s = a<b;",
        "const t = a < b, u = c > (d);",
        "const re = /a:b?c<d>(e)/g; const re2 = /[/]:/.test(s);",
        "if (ok) /x:y/.test(s)",
        "const q = x / y / z;",
        "const add = (a, b) => a + b;",
        "const asyncArrow = async (a) => await a;",
        "const { a = 1, b: { c } = {}, ...rest } = obj;",
        "const [x = 1, [y] = [], ...zs] = arr;",
        "function f({ a, b: bb = 2 } = {}, [c] = []) { return a ? bb : c; }",
        "const obj = { m(a, b) { return a }, get g() { return 1 }, async n() {}, *gen() {} };",
        "class K { #p = 1; static s = 2; m(a = b ? 1 : 2) { return this.#p } }",
        "const str = 'x: number' + \"y as T\" + `z: ${a ? b : c} as ${'q: r'}`;",
        "// let x: number = 1\n/* interface A {} */ const y = 1;",
        "const type = 1, as = 2, declare = 3, readonly = 4; type + as;",
        "let interfaceName = interface_ ? 1 : 2;",
        "const e = !a && !(b) ? c : d; if (x) !y && z();",
        "a !== b; a != b;",
        "obj?.a?.[b]?.(c); const t = x ?? y;",
        "const t = cond ?.5:1;",
        "const nested = `a${`b${c ? `d` : 'e'}`}f`;",
        "label: { break label; }",
        "x\n!y",
        "const big = 1_000n + 0x1Fn + 1e-3 + .5;",
        "for (const [k, v] of Object.entries(o)) console.log(k, v);",
        "const fn = function* () { yield /re/; };",
        "return { read: await tools.read({ file_path: 'a:b' }) };",
        "const neg = -x < -1;",
    ];
    for js in cases {
        same(js);
    }
}

#[test]
fn strings_comments_and_regexes_are_never_touched() {
    check(
        "const a: string = 'b: c'; // d: e\nconst r = /: T/; /* f as G */ const t = `${x as Y}: z`;",
        "const a = 'b: c'; // d: e\nconst r = /: T/; /* f as G */ const t = `${x}: z`;",
    );
}

#[test]
fn positions_survive() {
    let ts = "const a: number = 1;\nconst b = a as any;\nthrow new Error('x');";
    let js = strip_types(ts).unwrap();
    assert_eq!(
        js,
        "const a         = 1;\nconst b = a       ;\nthrow new Error('x');"
    );
}

#[test]
fn constructs_needing_code_generation_are_refused() {
    let cases = [
        ("enum Color { Red, Green }", "enum", 1, 1),
        ("let a = 1;\n  const enum E { A }", "const enum", 2, 3),
        ("namespace N { export const x = 1 }", "namespace", 1, 1),
        (
            "class P { constructor(private x: number) {} }",
            "parameter properties",
            1,
            23,
        ),
    ];
    for (ts, construct, line, column) in cases {
        let e = strip_types(ts).unwrap_err();
        assert_eq!(
            (e.construct, e.line, e.column),
            (construct, line, column),
            "{ts}"
        );
        assert!(e.to_string().contains(construct), "{e}");
    }
}

#[test]
fn unreadable_programs_are_left_to_the_engine() {
    same("const s = 'unterminated");
    same("const t = `open ${");
}

/// Token soup from a fixed seed: the stripper never panics or loops, and whatever it
/// returns keeps every position (only spaces replace characters).
#[test]
fn arbitrary_input_never_panics_and_keeps_positions() {
    const PIECES: &[&str] = &[
        "a",
        "b",
        "x",
        "as",
        "const",
        "let",
        "type",
        "interface",
        "class",
        "enum",
        "declare",
        "function",
        "=>",
        "(",
        ")",
        "{",
        "}",
        "[",
        "]",
        "<",
        ">",
        ":",
        "?",
        "!",
        "=",
        ",",
        ";",
        ".",
        "?.",
        "|",
        "&",
        "/",
        "/x/",
        "'s'",
        "\"d\"",
        "`t${",
        "}`",
        "`",
        "1",
        " ",
        "\n",
        "//c\n",
        "/*c*/",
        "private",
        "implements",
        "extends",
        "satisfies",
        "new",
        "return",
        "async",
        "this",
        "number",
        "string",
        "import",
        "namespace",
        "abstract",
        "readonly",
        "static",
        "get",
        "if",
        "for",
        "of",
        "catch",
        "case",
        "default",
        "*",
        "-",
        "+",
        "é",
    ];
    let mut seed: u64 = 0x5eed;
    let mut next = || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as usize
    };
    for _ in 0..20_000 {
        let len = next() % 40;
        let src: String = (0..len)
            .map(|_| PIECES[next() % PIECES.len()])
            .collect::<Vec<_>>()
            .join(if next() % 2 == 0 { "" } else { " " });
        if let Ok(out) = strip_types(&src) {
            assert_eq!(out.chars().count(), src.chars().count(), "{src:?}");
            for (a, b) in out.chars().zip(src.chars()) {
                assert!(a == b || (a == ' ' && b != '\n'), "{src:?} -> {out:?}");
            }
        }
    }
}

#[test]
fn deeply_nested_types_do_not_overflow() {
    let ts = format!("let f: {}number = 1;", "() => ".repeat(5000));
    let _ = strip_types(&ts);
    let ts = format!(
        "let g: {}number{} = 1;",
        "Array<".repeat(5000),
        ">".repeat(5000)
    );
    let _ = strip_types(&ts);
    let ts = format!("let h = x as {}1;", "keyof ".repeat(5000));
    let _ = strip_types(&ts);
}

#[test]
fn what_models_write() {
    let cases = [
        (
            "const results: Array<{ path: string; count: number }> = [];",
            "const results = [];",
        ),
        (
            "for (const f of files as string[]) {}",
            "for (const f of files) {}",
        ),
        (
            "const m = text.match(/(\\d+):(\\d+)/)!;",
            "const m = text.match(/(\\d+):(\\d+)/);",
        ),
        (
            "const byExt: Record<string, number> = {};",
            "const byExt = {};",
        ),
        (
            "function sum(xs: number[]): number { return xs.reduce((a: number, b: number) => a + b, 0); }",
            "function sum(xs) { return xs.reduce((a, b) => a + b, 0); }",
        ),
        (
            "try { x() } catch (e) { console.log((e as Error).message); }",
            "try { x() } catch (e) { console.log((e).message); }",
        ),
        (
            "const { stdout } = (await tools.bash({ command: 'ls', description: 'List' })) as { stdout: { text: string } };",
            "const { stdout } = (await tools.bash({ command: 'ls', description: 'List' }));",
        ),
        ("let out: string[] = [], n = 0;", "let out = [], n = 0;"),
        (
            "type Entry = { name: string };\nconst entries: Entry[] = [];",
            "const entries = [];",
        ),
        (
            "const api = { get(id: string): Item | undefined { return map.get(id); } };",
            "const api = { get(id) { return map.get(id); } };",
        ),
        ("const c = a?.b!.c;", "const c = a?.b.c;"),
        (
            "const t = cond ? (a as number) : (b as number);",
            "const t = cond ? (a) : (b);",
        ),
        (
            "const f = ok ? (x: number) => x : (x: number): number => -x;",
            "const f = ok ? (x) => x : (x) => -x;",
        ),
        (
            "rows.map(({ a, b }: Row) => a + b)",
            "rows.map(({ a, b }) => a + b)",
        ),
        (
            "const lines = (r.lines as Line[]).filter((l) => l.text.includes(':'));",
            "const lines = (r.lines).filter((l) => l.text.includes(':'));",
        ),
        (
            "const grouped = new Map<string, Array<{ file: string }>>();\nfor (const [k, v] of grouped) {}",
            "const grouped = new Map();\nfor (const [k, v] of grouped) {}",
        ),
        (
            "const settled = await Promise.all<string>(names.map(async (n: string): Promise<string> => n));",
            "const settled = await Promise.all(names.map(async (n) => n));",
        ),
        ("let count: number\ncount = 1", "let count\ncount = 1"),
    ];
    for (ts, js) in cases {
        check(ts, js);
    }
}
