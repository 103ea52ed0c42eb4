//! CEL for claim validation rules, claim mappings and user validation rules, on the `cel`
//! crate (cel-rust).
//!
//! What enters: an expression from the configuration file (compiled once, when the file is
//! loaded) and, per token, its verified claims or the mapped user. What leaves: a CEL value.
//!
//! cel-rust has no cost budget like cel-go's, so the cost is bounded where the expression is
//! compiled: its length ([`MAX_EXPRESSION_LEN`]), its size in nodes ([`MAX_NODES`]) and
//! macros (`all`, `exists`, `map`, `filter`...) that may not nest ([`MAX_COMPREHENSION_DEPTH`]).
//! With the token's own size bounded, one evaluation costs at most a bounded multiple of the
//! token's size. Expressions run only on claims whose signature was verified.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel::common::ast::Expr;
pub use cel::Value;
use cel::{Context, Env, IdedExpr, Program};

/// Longest expression accepted.
pub const MAX_EXPRESSION_LEN: usize = 10 * 1024;
/// Most nodes of a compiled expression.
pub const MAX_NODES: usize = 2_000;
/// Macros within macros are refused: each iterates over a list of the token's claims.
pub const MAX_COMPREHENSION_DEPTH: usize = 1;
/// Deepest expression tree accepted (evaluation recurses along it).
pub const MAX_DEPTH: usize = 64;
/// The parser recurses along the source's nesting; it runs on a thread with this stack.
const COMPILE_STACK_BYTES: usize = 256 << 20;
/// Deepest nesting of claim values turned into CEL values (deeper parts are dropped).
const MAX_VALUE_DEPTH: usize = 32;

/// Which variable an expression sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variable {
    Claims,
    User,
}

impl Variable {
    fn name(self) -> &'static str {
        match self {
            Variable::Claims => "claims",
            Variable::User => "user",
        }
    }
}

/// A compiled expression and its source (for messages).
pub struct Compiled {
    pub source: String,
    program: Program,
    variable: Variable,
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled").field("source", &self.source).finish_non_exhaustive()
    }
}

fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib())).clone()
}

/// Size, comprehension nesting and the names macros bind, of an expression.
#[derive(Default)]
struct Measure {
    nodes: usize,
    /// Deepest node seen.
    height: usize,
    depth: usize,
    bound: Vec<String>,
}

fn measure(e: &IdedExpr, depth: usize, m: &mut Measure) {
    measure_at(e, depth, 1, m)
}

fn measure_at(e: &IdedExpr, depth: usize, level: usize, m: &mut Measure) {
    m.nodes += 1;
    m.height = m.height.max(level);
    if m.nodes > MAX_NODES || level > MAX_DEPTH {
        return;
    }
    let measure = |x: &IdedExpr, d: usize, m: &mut Measure| measure_at(x, d, level + 1, m);
    match &e.expr {
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                measure(t, depth, m);
            }
            for a in &c.args {
                measure(a, depth, m);
            }
        }
        Expr::Comprehension(c) => {
            let inner = depth + 1;
            m.depth = m.depth.max(inner);
            m.bound.extend([c.iter_var.clone(), c.accu_var.clone()]);
            m.bound.extend(c.iter_var2.clone());
            measure(&c.iter_range, depth, m);
            measure(&c.accu_init, depth, m);
            for part in [&c.loop_cond, &c.loop_step, &c.result] {
                measure(part, inner, m);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| measure(x, depth, m)),
        Expr::Map(map) => {
            for entry in &map.entries {
                if let cel::common::ast::EntryExpr::MapEntry(me) = &entry.expr {
                    measure(&me.key, depth, m);
                    measure(&me.value, depth, m);
                }
            }
        }
        Expr::Select(s) => measure(&s.operand, depth, m),
        Expr::Struct(_) | Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// Compile `source` for `variable`; the error is upstream-like (`compilation failed: ...`).
pub fn compile(source: &str, variable: Variable) -> Result<Compiled, String> {
    if source.len() > MAX_EXPRESSION_LEN {
        return Err(format!("compilation failed: the expression is longer than {MAX_EXPRESSION_LEN} bytes"));
    }
    // Brackets nest the parser's recursion: refuse deep ones before parsing (brackets within
    // string literals count too, which only errs on the safe side).
    let mut open = 0usize;
    for c in source.chars() {
        match c {
            '(' | '[' | '{' => open += 1,
            ')' | ']' | '}' => open = open.saturating_sub(1),
            _ => {}
        }
        if open > MAX_DEPTH {
            return Err(format!("compilation failed: the expression nests deeper than {MAX_DEPTH}"));
        }
    }
    let owned = source.to_string();
    std::thread::Builder::new()
        .name("cel-compile".into())
        .stack_size(COMPILE_STACK_BYTES)
        .spawn(move || compile_here(&owned, variable))
        .map_err(|e| format!("compilation failed: {e}"))?
        .join()
        .map_err(|_| "compilation failed: the expression is too complex".to_string())?
}

fn compile_here(source: &str, variable: Variable) -> Result<Compiled, String> {
    let program = env().compile(source).map_err(|e| format!("compilation failed: {}", one_line(&e.to_string())))?;
    let mut m = Measure::default();
    measure(program.expression(), 0, &mut m);
    let refs = program.references();
    for v in refs.variables() {
        if v != variable.name() && !m.bound.iter().any(|b| b == v) {
            return Err(format!("compilation failed: undeclared reference to '{v}'"));
        }
    }
    if m.height > MAX_DEPTH {
        return Err(format!("compilation failed: the expression nests deeper than {MAX_DEPTH}"));
    }
    if m.nodes > MAX_NODES {
        return Err(format!("compilation failed: the expression has more than {MAX_NODES} nodes"));
    }
    if m.depth > MAX_COMPREHENSION_DEPTH {
        return Err("compilation failed: macros (all, exists, exists_one, map, filter) may not be nested".into());
    }
    Ok(Compiled { source: source.to_string(), program, variable })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A JSON value as a CEL value (numbers: int, uint, else double).
pub fn from_json(v: &serde_json::Value) -> Value {
    from_json_at(v, 0)
}

fn from_json_at(v: &serde_json::Value, depth: usize) -> Value {
    use serde_json::Value as J;
    if depth > MAX_VALUE_DEPTH {
        return Value::Null;
    }
    match v {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        J::String(s) => Value::String(Arc::new(s.clone())),
        J::Array(a) => Value::List(Arc::new(a.iter().map(|x| from_json_at(x, depth + 1)).collect())),
        J::Object(m) => {
            let map: HashMap<String, Value> = m.iter().map(|(k, x)| (k.clone(), from_json_at(x, depth + 1))).collect();
            Value::Map(map.into())
        }
    }
}

impl Compiled {
    /// Evaluate with the variable bound to `value`.
    pub fn eval(&self, value: &Value) -> Result<Value, String> {
        let mut ctx = Context::with_env(env());
        ctx.add_variable_from_value(self.variable.name(), value.clone());
        self.program.execute(&ctx).map_err(|e| e.to_string())
    }
}

/// A CEL value that must be a string.
pub fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        _ => None,
    }
}

/// A CEL value that must be a string or a list of strings (an empty string: none).
pub fn as_strings(v: &Value) -> Option<Vec<String>> {
    match v {
        Value::String(s) if s.is_empty() => Some(Vec::new()),
        Value::String(s) => Some(vec![s.to_string()]),
        Value::List(l) => l.iter().map(as_string).collect(),
        Value::Null => Some(Vec::new()),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compiling_and_bounds() {
        let cases: Vec<(&str, Variable, Result<(), &str>)> = vec![
            ("claims.sub", Variable::Claims, Ok(())),
            ("'x:' + claims.sub", Variable::Claims, Ok(())),
            ("claims.groups.all(g, g.startsWith('a'))", Variable::Claims, Ok(())),
            ("user.username.startsWith('x')", Variable::User, Ok(())),
            ("user.username", Variable::Claims, Err("undeclared reference to 'user'")),
            ("claims.sub", Variable::User, Err("undeclared reference to 'claims'")),
            ("claims.sub +", Variable::Claims, Err("compilation failed")),
            (
                "claims.a.all(x, claims.b.all(y, x == y))",
                Variable::Claims,
                Err("macros (all, exists, exists_one, map, filter) may not be nested"),
            ),
        ];
        for (src, var, want) in cases {
            match (compile(src, var), want) {
                (Ok(_), Ok(())) => {}
                (Err(e), Err(w)) => assert!(e.contains(w), "{src}: {e}"),
                (got, want) => panic!("{src}: got {got:?}, want {want:?}"),
            }
        }
        let long = format!("claims.sub == '{}'", "a".repeat(MAX_EXPRESSION_LEN));
        assert!(compile(&long, Variable::Claims).unwrap_err().contains("longer than"));
        let deep = vec!["1"; MAX_NODES].join(" + ");
        assert!(compile(&format!("claims.n + {deep}"), Variable::Claims).unwrap_err().contains("nests deeper"));
        let wide = format!("[{}]", vec!["[1]"; MAX_NODES].join(", "));
        assert!(compile(&format!("claims.n in {wide}"), Variable::Claims).unwrap_err().contains("nodes"));
        let parens = format!("{}claims.n{}", "(".repeat(4000), ")".repeat(4000));
        assert!(compile(&parens, Variable::Claims).is_err(), "deep nesting is refused, not a crash");
        let longest = format!("claims.n{}", "+1".repeat((MAX_EXPRESSION_LEN - 8) / 2));
        assert!(compile(&longest, Variable::Claims).unwrap_err().contains("nests deeper"), "the longest chain parses");
    }

    #[test]
    fn evaluating_claims() {
        let claims = from_json(&json!({"sub": "alice", "groups": ["a", "b"], "n": 3, "nested": {"x": true}}));
        let cases: Vec<(&str, Value)> = vec![
            ("claims.sub", Value::String(Arc::new("alice".into()))),
            ("'p:' + claims.sub", Value::String(Arc::new("p:alice".into()))),
            ("claims.groups.map(g, 'g:' + g)", Value::List(Arc::new(vec!["g:a".into(), "g:b".into()]))),
            ("claims.n > 2 && claims.nested.x", Value::Bool(true)),
            ("has(claims.missing)", Value::Bool(false)),
            ("size(claims.groups)", Value::Int(2)),
        ];
        for (src, want) in cases {
            assert_eq!(compile(src, Variable::Claims).unwrap().eval(&claims).unwrap(), want, "{src}");
        }
        assert!(compile("claims.missing", Variable::Claims).unwrap().eval(&claims).is_err());
        assert_eq!(as_strings(&Value::List(Arc::new(vec!["a".into()]))), Some(vec!["a".to_string()]));
        assert_eq!(as_strings(&Value::String(Arc::new(String::new()))), Some(vec![]));
        assert_eq!(as_strings(&Value::Int(1)), None);
    }
}
