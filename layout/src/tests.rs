//! The checker on small crates written out here.

use super::*;

/// A crate rooted at `src/lib.rs` made of `files` (path, text).
fn krate(files: &[(&str, &str)]) -> (Sources, Crate) {
    let sources: Sources = files.iter().map(|(p, t)| (PathBuf::from(p), t.to_string())).collect();
    let krate = Crate::load(&sources, Path::new("src/lib.rs"));
    assert!(krate.errors.is_empty(), "{:?}", krate.errors);
    (sources, krate)
}

fn cycle_files(krate: &Crate) -> Vec<Vec<String>> {
    krate.cycles().into_iter().map(|c| c.into_iter().map(|p| p.display().to_string()).collect()).collect()
}

fn edges(krate: &Crate, file: &str) -> Vec<String> {
    krate.graph()[Path::new(file)].iter().map(|p| p.display().to_string()).collect()
}

/// `b` imports `a` plainly; `a` imports `b` (or `b::c`) by the spelling under test.
#[test]
fn a_cycle_is_found_in_every_spelling() {
    let cases: &[(&str, &str)] = &[
        ("use crate::", "use crate::b::f;"),
        ("use crate:: group", "use crate::{x::y, b::{f, g}};"),
        ("crate:: in an expression", "fn g() { let _ = crate::b::f(1); }"),
        ("crate:: in a type", "struct S { x: Vec<crate::b::T> }"),
        ("crate:: in a pattern", "fn g(x: u8) { match x { crate::b::ONE => {} _ => {} } }"),
        ("crate:: in a macro", "fn g() { println!(\"{}\", crate::b::NAME); }"),
        ("crate:: in a nested macro", "fn g() { assert!(vec![crate::b::f()].is_empty()); }"),
        ("$crate:: in macro_rules", "macro_rules! m { () => { $crate::b::f() }; }"),
        ("use super::", "use super::b::f;"),
        ("super:: in a call", "fn g() { super::b::f(); }"),
        ("use super:: group", "use super::{b::f, x};"),
        ("an inline module's super::super::", "mod inner { fn g() { super::super::b::f(); } }"),
        ("a use in a function body", "fn g() { use crate::b::f; f(); }"),
        ("an alias of a module", "use crate::b as bee; fn g() { bee::f(); }"),
    ];
    for (spelling, a) in cases {
        let (_, k) = krate(&[
            ("src/lib.rs", "mod a; mod b; mod x;"),
            ("src/a.rs", a),
            ("src/b.rs", "use crate::a::thing;"),
            ("src/x.rs", "pub mod y {}"),
        ]);
        assert_eq!(cycle_files(&k), [vec!["src/a.rs", "src/b.rs"]], "{spelling}: {a}");
    }
}

/// Spellings that start below the importing file: `self::`, a bare child, an alias of a module.
#[test]
fn a_cycle_through_a_child_is_found() {
    let cases: &[(&str, &str)] = &[
        ("use self::", "mod inner; use self::inner::f;"),
        ("self:: in a call", "mod inner; fn g() { self::inner::f(); }"),
        ("use of a bare child", "mod inner; use inner::f;"),
        ("a bare child in a call", "mod inner; fn g() { inner::f(); }"),
        ("a bare child in a macro", "mod inner; fn g() { let _ = format!(\"{}\", inner::f()); }"),
        ("a grandchild through an alias", "mod inner; use self::inner as i; fn g() { i::deep::f(); }"),
    ];
    for (spelling, a) in cases {
        let (_, k) = krate(&[
            ("src/lib.rs", "mod a; mod b;"),
            ("src/a.rs", a),
            ("src/a/inner.rs", "pub mod deep; use crate::b::f;"),
            ("src/a/inner/deep.rs", "use crate::b::f;"),
            ("src/b.rs", "use crate::a::thing;"),
        ]);
        let found = cycle_files(&k);
        assert_eq!(found.len(), 1, "{spelling}: {a}: {found:?}");
        assert!(found[0].contains(&"src/a.rs".to_string()) && found[0].contains(&"src/b.rs".to_string()), "{spelling}");
    }
    // An alias reaching a module below an imported one: the use alone names only `b`.
    let (_, k) = krate(&[
        ("src/lib.rs", "mod a; mod b;"),
        ("src/a.rs", "use crate::b; fn g() { b::c::f(); }"),
        ("src/b.rs", "pub mod c;"),
        ("src/b/c.rs", "use crate::a::thing;"),
    ]);
    assert_eq!(cycle_files(&k), [vec!["src/a.rs", "src/b/c.rs"]]);
}

#[test]
fn what_is_not_an_edge() {
    let (_, k) = krate(&[
        ("src/lib.rs", "mod a; mod b; mod c; pub struct Root;"),
        (
            "src/a.rs",
            "//! Unlike crate::b, this one ...\n\
             // crate::b::f\n\
             /// Calls [`crate::b::f`].\n\
             fn g() { let s = \"crate::b::f\"; let r = crate::Root; }\n\
             #[cfg(test)]\nmod tests { use crate::b::f; }\n\
             #[cfg(test)]\nfn helper() { crate::b::f(); }\n\
             #[cfg(all(test, unix))]\nuse crate::b::f;\n\
             #[cfg(test)]\n#[path = \"a_tests.rs\"]\nmod more;\n\
             mod inner;",
        ),
        ("src/a_tests.rs", "use crate::b::f;"),
        // A child naming its parents; an ancestor through super:: and crate:: both.
        ("src/a/inner.rs", "use super::thing; use crate::a::x; fn g() { super::g(); }"),
        // An external path with the name of a module, and a local variable of one's name.
        ("src/b.rs", "use ::a::x; fn f(a: u8) { let _ = std::a::X; }"),
        ("src/c.rs", "use crate::a::inner::g;"),
    ]);
    for f in ["src/a.rs", "src/a/inner.rs", "src/b.rs"] {
        assert!(edges(&k, f).is_empty(), "{f}: {:?}", edges(&k, f));
    }
    assert_eq!(edges(&k, "src/c.rs"), ["src/a/inner.rs"]);
    assert!(k.test_files.contains(Path::new("src/a_tests.rs")));
    assert!(!k.graph().contains_key(Path::new("src/a_tests.rs")), "test files are not in the graph");
    assert!(k.cycles().is_empty());
}

#[test]
fn module_files_are_found_as_the_compiler_finds_them() {
    let (sources, k) = krate(&[
        ("src/lib.rs", "mod a; mod b; #[path = \"other/c_impl.rs\"] mod c; mod d { pub mod e; }"),
        ("src/a/mod.rs", "mod x;"),
        ("src/a/x.rs", "use crate::c::f;"),
        ("src/b.rs", "mod y;"),
        ("src/b/y.rs", ""),
        ("src/other/c_impl.rs", "use crate::d::e::f;"),
        ("src/d/e.rs", "use crate::a::x::f;"),
        ("src/dead.rs", "fn never() {}"),
    ]);
    assert_eq!(edges(&k, "src/a/x.rs"), ["src/other/c_impl.rs"]);
    assert_eq!(cycle_files(&k), [vec!["src/a/x.rs", "src/d/e.rs", "src/other/c_impl.rs"]]);
    assert_eq!(Crate::orphans(&[&k], &sources), [Path::new("src/dead.rs")]);
    // A missing file or one that does not parse is an error, not a silent gap.
    let sources: Sources = [("src/lib.rs", "mod gone; mod bad;"), ("src/bad.rs", "fn {")]
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect();
    assert_eq!(Crate::load(&sources, Path::new("src/lib.rs")).errors.len(), 2);
}

#[test]
fn cycles_are_strongly_connected_components() {
    let graph: BTreeMap<&str, BTreeSet<&str>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
        ("f", vec!["g"]),
        ("g", vec!["f", "missing"]),
        ("h", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.into_iter().collect()))
    .collect();
    assert_eq!(cycles(&graph), [vec!["a", "b", "c"], vec!["f", "g"]]);
}

#[test]
fn long_files_count_non_test_lines() {
    let body = "fn f() {}\n".repeat(MAX_LINES);
    let tests = format!("#[cfg(test)]\nmod tests {{\n{body}}}\n");
    assert_eq!(non_test_lines(&format!("fn g() {{}}\n{tests}")), 1);
    assert_eq!(non_test_lines("fn a() {}\n#[cfg(test)]\nfn t() {\n}\nfn b() {}\n"), 2);
    let files: Sources = [
        ("short.rs", "//! Short.\nfn f() {}\n".to_string()),
        ("exactly.rs", body.clone()),
        ("unexplained.rs", format!("//! Long.\n{body}")),
        ("explained.rs", format!("//! One parser; this file is over 800\n//! lines because ...\n{body}")),
        ("long_tests.rs", format!("{body}{tests}")),
        ("test_file.rs", format!("{body}{body}")),
    ]
    .into_iter()
    .map(|(p, t)| (PathBuf::from(p), t))
    .collect();
    let test_files = [PathBuf::from("test_file.rs")].into_iter().collect();
    assert_eq!(long_files(&files, &test_files), [(PathBuf::from("unexplained.rs"), MAX_LINES + 1)]);
}

const TABLE: &str = "\
# Doc

| Layer | What it is | May import |
|---|---|---|
| `low.rs`, `util/` | the ground | — |
| `mid/` | the middle | `low.rs` |
| `mid/special.rs` | a file above its folder | `top/` |
| `top/` | the top | `mid/`, `lib.rs` |
| `lib.rs` | the root | `*` |

Text after the table.
";

/// A crate of `files` checked against `TABLE`.
fn violations(files: &[(&str, &str)]) -> Vec<String> {
    let (_, k) = krate(files);
    let layers = Layers::parse(TABLE).expect("the table parses");
    layers.check(Path::new("src"), &k.imports()).iter().map(ToString::to_string).collect()
}

#[test]
fn a_forbidden_edge_fails_with_file_line_and_edge() {
    let base = [
        ("src/lib.rs", "mod low; mod util; mod mid; mod top; pub struct State; fn run() { top::t(&State); }"),
        ("src/low.rs", "pub fn f() {}"),
        ("src/util/mod.rs", "pub fn g() { crate::low::f(); }"),
        ("src/mid/mod.rs", "mod special; pub fn m() { crate::util::g(); }"),
        ("src/mid/special.rs", "pub fn s() { crate::top::t(); }"),
        ("src/top/mod.rs", "pub fn t(_: &crate::State) { crate::mid::m(); }"),
    ];
    assert_eq!(
        violations(&base),
        Vec::<String>::new(),
        "down, sideways in a layer, through a chain and a named root item are allowed"
    );
    // Planted: the ground reaching up, in two spellings, and a layer reaching the crate root.
    let mut planted = base.to_vec();
    planted[1] = ("src/low.rs", "pub fn f() {}\nfn up() {\n    crate::mid::m();\n}\nuse super::top::t;");
    planted[3] = ("src/mid/mod.rs", "mod special; pub fn m() { crate::util::g(); }\nfn s(_: &crate::State) {}");
    assert_eq!(
        violations(&planted),
        [
            "low.rs:3: `crate::mid::m` reaches mid/mod.rs: low.rs may not import mid/",
            "low.rs:5: `super::top::t` reaches top/mod.rs: low.rs may not import top/",
            "mid/mod.rs:2: `crate::State` reaches lib.rs: mid/ may not import lib.rs",
        ]
    );
    // A file named apart from its folder: `mid/special.rs` may import `top/`, the rest of `mid/` may not.
    let mut planted = base.to_vec();
    planted[3] = ("src/mid/mod.rs", "mod special; pub fn m() { crate::top::t(); }");
    assert_eq!(violations(&planted), ["mid/mod.rs:1: `crate::top::t` reaches top/mod.rs: mid/ may not import top/"]);
}

#[test]
fn the_table_is_read_and_must_be_an_order() {
    let layers = Layers::parse(TABLE).expect("parses");
    let names: Vec<&str> = layers.layers.iter().map(Layer::name).collect();
    assert_eq!(names, ["low.rs", "mid/", "mid/special.rs", "top/", "lib.rs"]);
    let at = |p: &str| layers.layer_of(Path::new(p)).map(|i| layers.layers[i].name());
    assert_eq!(at("util/deep/x.rs"), Some("low.rs"));
    assert_eq!(at("mid/special.rs"), Some("mid/special.rs"));
    assert_eq!(at("mid/other.rs"), Some("mid/"));
    assert_eq!(at("other.rs"), None);
    assert_eq!(layers.unlayered([Path::new("other.rs"), Path::new("low.rs")]), [PathBuf::from("other.rs")]);
    for (fault, table) in [
        ("no table", "| a | b |\n|---|---|\n| `x` | y |\n"),
        ("a cycle", "| Layer | What it is | May import |\n|---|---|---|\n| `a/` | a | `b/` |\n| `b/` | b | `a/` |\n"),
        ("an unknown name", "| Layer | What it is | May import |\n|---|---|---|\n| `a/` | a | `nowhere/` |\n"),
        ("a path twice", "| Layer | What it is | May import |\n|---|---|---|\n| `a/` | a | |\n| `a/` | b | |\n"),
        ("no path", "| Layer | What it is | May import |\n|---|---|---|\n| a | a | |\n"),
    ] {
        assert!(Layers::parse(table).is_err(), "{fault} is refused");
    }
}
