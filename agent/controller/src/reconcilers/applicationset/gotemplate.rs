//! The part of Go's `text/template` (with Sprig's common functions) that ApplicationSets with
//! `goTemplate: true` use: `{{ .a.b }}`, `$` and `$var`, pipelines, `if`/`else if`/`else`,
//! `range` (with `$i, $v :=`), `with`, `{{- -}}` trimming, comments, and the functions in
//! [`FUNCTIONS`]. Any other function is refused naming it. Every template is parsed before it
//! runs, nested at most [`MAX_DEPTH`] deep, and runs within [`MAX_STEPS`] steps and
//! [`MAX_OUTPUT`] bytes, so a hostile template costs bounded work. Pure.

use std::fmt::Write as _;

use serde_json::Value;

/// The functions a template may call.
pub const FUNCTIONS: &[&str] = &[
    "and",
    "contains",
    "default",
    "empty",
    "eq",
    "ge",
    "gt",
    "hasPrefix",
    "hasSuffix",
    "index",
    "join",
    "le",
    "len",
    "lower",
    "lt",
    "ne",
    "normalize",
    "not",
    "or",
    "print",
    "printf",
    "quote",
    "replace",
    "squote",
    "toJson",
    "toYaml",
    "trim",
    "trimPrefix",
    "trimSuffix",
    "trunc",
    "upper",
];

/// How deep blocks and parentheses may nest.
pub const MAX_DEPTH: usize = 32;
/// Evaluation steps (each action, each range iteration, each call) one render may take.
pub const MAX_STEPS: usize = 100_000;
/// Bytes one render may write.
pub const MAX_OUTPUT: usize = 1 << 20;

/// What a template says when a key is missing (`goTemplateOptions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingKey {
    /// Go's default: `<no value>`.
    #[default]
    Default,
    /// `missingkey=zero`: the zero value (an empty string).
    Zero,
    /// `missingkey=error`: the render fails naming the key.
    Error,
}

/// A parsed template.
#[derive(Debug, Clone)]
pub struct Template {
    nodes: Vec<Node>,
}

#[derive(Debug, Clone)]
enum Node {
    Text(String),
    /// An action whose value is printed (unless it only declares variables).
    Print(Pipeline),
    If {
        branches: Vec<(Pipeline, Vec<Node>)>,
        otherwise: Vec<Node>,
    },
    Range {
        pipe: Pipeline,
        body: Vec<Node>,
        otherwise: Vec<Node>,
    },
    With {
        pipe: Pipeline,
        body: Vec<Node>,
        otherwise: Vec<Node>,
    },
}

#[derive(Debug, Clone)]
struct Pipeline {
    /// `$a :=` or `$k, $v :=` (range).
    decl: Vec<String>,
    cmds: Vec<Vec<Arg>>,
}

#[derive(Debug, Clone)]
enum Arg {
    /// `.`, or `.a.b` (fields of dot).
    Dot(Vec<String>),
    /// `$`, `$x`, `$x.a`.
    Var(String, Vec<String>),
    Lit(Value),
    Func(String),
    /// `( pipeline )`, then fields.
    Sub(Box<Pipeline>, Vec<String>),
}

/// Parses `src`.
pub fn parse(src: &str) -> Result<Template, String> {
    let tokens = split(src)?;
    let mut pos = 0;
    let (nodes, end) = parse_list(&tokens, &mut pos, 0)?;
    match end {
        None => Ok(Template { nodes }),
        Some(word) => Err(format!("unexpected {{{{{word}}}}}")),
    }
}

/// Text and actions, with `{{-` and `-}}` trimming applied and comments dropped.
enum Piece {
    Text(String),
    Action(String),
}

fn split(src: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while let Some(start) = rest.find("{{") {
        let mut text = &rest[..start];
        if trim_next {
            text = text.trim_start();
        }
        let after = &rest[start + 2..];
        let (trim_before, body_start) = match after.strip_prefix('-') {
            Some(b) if b.starts_with(|c: char| c.is_ascii_whitespace()) => (true, b),
            _ => (false, after),
        };
        if trim_before {
            text = text.trim_end();
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text.to_string()));
        }
        let end = find_close(body_start).ok_or("an action {{ is not closed with }}")?;
        let mut body = &body_start[..end];
        trim_next = false;
        if let Some(b) = body.strip_suffix('-')
            && b.ends_with(|c: char| c.is_ascii_whitespace())
        {
            body = b;
            trim_next = true;
        }
        let body = body.trim();
        if !(body.starts_with("/*") && body.ends_with("*/")) {
            pieces.push(Piece::Action(body.to_string()));
        }
        rest = &body_start[end + 2..];
    }
    let text = if trim_next { rest.trim_start() } else { rest };
    if !text.is_empty() {
        pieces.push(Piece::Text(text.to_string()));
    }
    Ok(pieces)
}

/// Where the action's closing `}}` is, skipping quoted strings.
fn find_close(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'`' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'`' {
                    i += 1;
                }
            }
            b'}' if bytes.get(i + 1) == Some(&b'}') => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Nodes up to a closing keyword (`end`, `else`, `else if …`), which is returned.
fn parse_list(
    pieces: &[Piece],
    pos: &mut usize,
    depth: usize,
) -> Result<(Vec<Node>, Option<String>), String> {
    if depth > MAX_DEPTH {
        return Err(format!("blocks nested deeper than {MAX_DEPTH}"));
    }
    let mut nodes = Vec::new();
    while let Some(piece) = pieces.get(*pos) {
        *pos += 1;
        let action = match piece {
            Piece::Text(t) => {
                nodes.push(Node::Text(t.clone()));
                continue;
            }
            Piece::Action(a) => a.as_str(),
        };
        let (word, rest) = action
            .split_once(|c: char| c.is_ascii_whitespace())
            .map_or((action, ""), |(w, r)| (w, r.trim()));
        match word {
            "end" | "else" => return Ok((nodes, Some(action.to_string()))),
            "if" => nodes.push(parse_if(pieces, pos, rest, depth)?),
            "range" | "with" => {
                let pipe = pipeline(rest, depth)?;
                let (body, end) = parse_list(pieces, pos, depth + 1)?;
                let otherwise = match end.as_deref() {
                    Some("end") => Vec::new(),
                    Some("else") => match parse_list(pieces, pos, depth + 1)? {
                        (o, Some(e)) if e == "end" => o,
                        _ => {
                            return Err(format!(
                                "{{{{{word}}}}} … {{{{else}}}} has no {{{{end}}}}"
                            ));
                        }
                    },
                    _ => return Err(format!("{{{{{word} {rest}}}}} has no {{{{end}}}}")),
                };
                nodes.push(if word == "range" {
                    Node::Range {
                        pipe,
                        body,
                        otherwise,
                    }
                } else {
                    Node::With {
                        pipe,
                        body,
                        otherwise,
                    }
                });
            }
            "define" | "template" | "block" | "break" | "continue" => {
                return Err(format!("{{{{{word}}}}} is not supported"));
            }
            _ => nodes.push(Node::Print(pipeline(action, depth)?)),
        }
    }
    Ok((nodes, None))
}

fn parse_if(pieces: &[Piece], pos: &mut usize, cond: &str, depth: usize) -> Result<Node, String> {
    let mut branches = Vec::new();
    let mut cond = cond.to_string();
    loop {
        let pipe = pipeline(&cond, depth)?;
        let (body, end) = parse_list(pieces, pos, depth + 1)?;
        branches.push((pipe, body));
        match end.as_deref() {
            Some("end") => {
                return Ok(Node::If {
                    branches,
                    otherwise: Vec::new(),
                });
            }
            Some("else") => {
                return match parse_list(pieces, pos, depth + 1)? {
                    (otherwise, Some(e)) if e == "end" => Ok(Node::If {
                        branches,
                        otherwise,
                    }),
                    _ => Err("{{if}} … {{else}} has no {{end}}".into()),
                };
            }
            Some(other) if other.starts_with("else if ") => {
                cond = other["else if ".len()..].to_string();
            }
            _ => return Err(format!("{{{{if {cond}}}}} has no {{{{end}}}}")),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Pipe,
    Open,
    Close,
    Declare,
    Comma,
    Word(String),
    Str(String),
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let mut toks = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            _ if c.is_whitespace() => i += 1,
            '|' => {
                toks.push(Tok::Pipe);
                i += 1;
            }
            '(' => {
                toks.push(Tok::Open);
                i += 1;
            }
            ')' => {
                toks.push(Tok::Close);
                i += 1;
            }
            ',' => {
                toks.push(Tok::Comma);
                i += 1;
            }
            ':' if chars.get(i + 1) == Some(&'=') => {
                toks.push(Tok::Declare);
                i += 2;
            }
            '"' => {
                let mut out = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(format!("unterminated string in '{s}'")),
                        Some('"') => break,
                        Some('\\') => {
                            i += 1;
                            match chars.get(i) {
                                Some('n') => out.push('\n'),
                                Some('t') => out.push('\t'),
                                Some('\\') => out.push('\\'),
                                Some('"') => out.push('"'),
                                other => {
                                    return Err(format!("unknown escape \\{other:?} in '{s}'"));
                                }
                            }
                        }
                        Some(ch) => out.push(*ch),
                    }
                    i += 1;
                }
                toks.push(Tok::Str(out));
                i += 1;
            }
            '`' => {
                let start = i + 1;
                let end = chars[start..]
                    .iter()
                    .position(|&ch| ch == '`')
                    .ok_or_else(|| format!("unterminated raw string in '{s}'"))?;
                toks.push(Tok::Str(chars[start..start + end].iter().collect()));
                i = start + end + 1;
            }
            _ => {
                let start = i;
                let ends = |i: usize| {
                    let c = chars[i];
                    c.is_whitespace()
                        || matches!(c, '|' | '(' | ')' | ',' | '"' | '`')
                        || (c == ':' && chars.get(i + 1) == Some(&'='))
                };
                while i < chars.len() && !ends(i) {
                    i += 1;
                }
                toks.push(Tok::Word(chars[start..i].iter().collect()));
            }
        }
    }
    Ok(toks)
}

fn pipeline(src: &str, depth: usize) -> Result<Pipeline, String> {
    let toks = lex(src)?;
    let mut pos = 0;
    let pipe = parse_pipeline(&toks, &mut pos, depth)?;
    if pos != toks.len() {
        return Err(format!("unexpected '{:?}' in '{src}'", toks[pos]));
    }
    Ok(pipe)
}

fn parse_pipeline(toks: &[Tok], pos: &mut usize, depth: usize) -> Result<Pipeline, String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH}"));
    }
    let mut decl = Vec::new();
    // `$x :=` or `$k, $v :=`
    let mut look = *pos;
    let mut names = Vec::new();
    while let Some(Tok::Word(w)) = toks.get(look) {
        if !w.starts_with('$') {
            break;
        }
        names.push(w.clone());
        look += 1;
        match toks.get(look) {
            Some(Tok::Comma) => look += 1,
            Some(Tok::Declare) => {
                decl = names.clone();
                *pos = look + 1;
                break;
            }
            _ => break,
        }
    }
    let mut cmds = Vec::new();
    let mut cmd = Vec::new();
    while let Some(tok) = toks.get(*pos) {
        match tok {
            Tok::Close => break,
            Tok::Pipe => {
                if cmd.is_empty() {
                    return Err("a pipeline has an empty command".into());
                }
                cmds.push(std::mem::take(&mut cmd));
                *pos += 1;
            }
            Tok::Open => {
                *pos += 1;
                let inner = parse_pipeline(toks, pos, depth + 1)?;
                if toks.get(*pos) != Some(&Tok::Close) {
                    return Err("a '(' is not closed".into());
                }
                *pos += 1;
                // Fields right after the parenthesis: `(index . "a").b`.
                let fields = match toks.get(*pos) {
                    Some(Tok::Word(w)) if w.starts_with('.') && w.len() > 1 => {
                        *pos += 1;
                        fields_of(w)?
                    }
                    _ => Vec::new(),
                };
                cmd.push(Arg::Sub(Box::new(inner), fields));
            }
            Tok::Str(s) => {
                cmd.push(Arg::Lit(Value::String(s.clone())));
                *pos += 1;
            }
            Tok::Word(w) => {
                cmd.push(word(w)?);
                *pos += 1;
            }
            Tok::Declare | Tok::Comma => return Err(format!("unexpected {tok:?}")),
        }
    }
    if !cmd.is_empty() {
        cmds.push(cmd);
    }
    if cmds.is_empty() {
        return Err("an empty action".into());
    }
    Ok(Pipeline { decl, cmds })
}

fn fields_of(w: &str) -> Result<Vec<String>, String> {
    w.trim_start_matches('.')
        .split('.')
        .map(|f| {
            if f.is_empty() || !f.chars().all(|c| c.is_alphanumeric() || c == '_') {
                Err(format!("'{w}' is not a field chain"))
            } else {
                Ok(f.to_string())
            }
        })
        .collect()
}

fn word(w: &str) -> Result<Arg, String> {
    if w == "." {
        return Ok(Arg::Dot(Vec::new()));
    }
    if w.starts_with('.') {
        return Ok(Arg::Dot(fields_of(w)?));
    }
    if let Some(var) = w.strip_prefix('$') {
        let (name, fields) = match var.split_once('.') {
            Some((n, f)) => (n, fields_of(&format!(".{f}"))?),
            None => (var, Vec::new()),
        };
        return Ok(Arg::Var(format!("${name}"), fields));
    }
    match w {
        "true" => return Ok(Arg::Lit(Value::Bool(true))),
        "false" => return Ok(Arg::Lit(Value::Bool(false))),
        "nil" => return Ok(Arg::Lit(Value::Null)),
        _ => {}
    }
    if w.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
        if let Ok(i) = w.parse::<i64>() {
            return Ok(Arg::Lit(Value::from(i)));
        }
        if let Some(n) = w.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
            return Ok(Arg::Lit(Value::Number(n)));
        }
        return Err(format!("'{w}' is not a number"));
    }
    if FUNCTIONS.contains(&w) {
        return Ok(Arg::Func(w.to_string()));
    }
    Err(format!(
        "function '{w}' is not supported (skewer's Go templates have: {})",
        FUNCTIONS.join(", ")
    ))
}

/// One render's state.
struct Run {
    vars: Vec<(String, Value)>,
    out: String,
    steps: usize,
    missing: MissingKey,
}

/// A missing key's marker while evaluating (printed as Go prints it).
const NO_VALUE: &str = "<no value>";

impl Template {
    /// Renders with `data` as dot.
    pub fn render(&self, data: &Value, missing: MissingKey) -> Result<String, String> {
        let mut run = Run {
            vars: vec![("$".into(), data.clone())],
            out: String::new(),
            steps: 0,
            missing,
        };
        run.nodes(&self.nodes, data)?;
        Ok(run.out)
    }
}

impl Run {
    fn step(&mut self) -> Result<(), String> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Err(format!("the template took more than {MAX_STEPS} steps"));
        }
        if self.out.len() > MAX_OUTPUT {
            return Err(format!("the template wrote more than {MAX_OUTPUT} bytes"));
        }
        Ok(())
    }

    fn nodes(&mut self, nodes: &[Node], dot: &Value) -> Result<(), String> {
        let scope = self.vars.len();
        for node in nodes {
            self.step()?;
            match node {
                Node::Text(t) => self.out.push_str(t),
                Node::Print(p) => {
                    let v = self.pipeline(p, dot)?;
                    if p.decl.is_empty() {
                        let text = printed(&v);
                        self.out.push_str(&text);
                    }
                }
                Node::If {
                    branches,
                    otherwise,
                } => {
                    let mut taken = false;
                    for (cond, body) in branches {
                        if truthy(&self.pipeline(cond, dot)?) {
                            self.nodes(body, dot)?;
                            taken = true;
                            break;
                        }
                    }
                    if !taken {
                        self.nodes(otherwise, dot)?;
                    }
                }
                Node::With {
                    pipe,
                    body,
                    otherwise,
                } => {
                    let v = self.pipeline(pipe, dot)?;
                    if truthy(&v) {
                        self.nodes(body, &v)?;
                    } else {
                        self.nodes(otherwise, dot)?;
                    }
                }
                Node::Range {
                    pipe,
                    body,
                    otherwise,
                } => {
                    let mut bare = pipe.clone();
                    bare.decl.clear();
                    let v = self.pipeline(&bare, dot)?;
                    let items: Vec<(Value, Value)> = match &v {
                        Value::Array(a) => a
                            .iter()
                            .enumerate()
                            .map(|(i, x)| (Value::from(i), x.clone()))
                            .collect(),
                        Value::Object(m) => m
                            .iter()
                            .map(|(k, x)| (Value::String(k.clone()), x.clone()))
                            .collect(),
                        Value::Null => Vec::new(),
                        Value::Number(n) if n.as_u64().is_some() => (0..n.as_u64().unwrap_or(0))
                            .take(MAX_STEPS)
                            .map(|i| (Value::from(i), Value::from(i)))
                            .collect(),
                        other => {
                            return Err(format!("range can't iterate over {}", printed(other)));
                        }
                    };
                    if items.is_empty() {
                        self.nodes(otherwise, dot)?;
                    }
                    for (key, item) in items {
                        self.step()?;
                        let mark = self.vars.len();
                        match pipe.decl.as_slice() {
                            [] => {}
                            [v] => self.vars.push((v.clone(), item.clone())),
                            [k, v, ..] => {
                                self.vars.push((k.clone(), key));
                                self.vars.push((v.clone(), item.clone()));
                            }
                        }
                        self.nodes(body, &item)?;
                        self.vars.truncate(mark);
                    }
                }
            }
        }
        self.vars.truncate(scope);
        Ok(())
    }

    fn pipeline(&mut self, p: &Pipeline, dot: &Value) -> Result<Value, String> {
        let mut last: Option<Value> = None;
        for cmd in &p.cmds {
            self.step()?;
            last = Some(self.command(cmd, dot, last)?);
        }
        let v = last.unwrap_or(Value::Null);
        for name in &p.decl {
            self.vars.push((name.clone(), v.clone()));
        }
        Ok(v)
    }

    fn command(&mut self, cmd: &[Arg], dot: &Value, piped: Option<Value>) -> Result<Value, String> {
        let Some(first) = cmd.first() else {
            return Err("an empty command".into());
        };
        if let Arg::Func(name) = first {
            let mut args = Vec::with_capacity(cmd.len());
            for a in &cmd[1..] {
                args.push(self.arg(a, dot)?);
            }
            args.extend(piped);
            return call(name, &args);
        }
        if cmd.len() > 1 || piped.is_some() {
            return Err(format!(
                "can't give arguments to a value that is not a function: {first:?}"
            ));
        }
        self.arg(first, dot)
    }

    fn arg(&mut self, a: &Arg, dot: &Value) -> Result<Value, String> {
        match a {
            Arg::Dot(fields) => self.fields(dot, fields, "."),
            Arg::Var(name, fields) => {
                let v = self
                    .vars
                    .iter()
                    .rev()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| format!("undefined variable {name}"))?;
                self.fields(&v, fields, name)
            }
            Arg::Lit(v) => Ok(v.clone()),
            Arg::Func(name) => call(name, &[]),
            Arg::Sub(p, fields) => {
                let v = self.pipeline(p, dot)?;
                self.fields(&v, fields, "(…)")
            }
        }
    }

    fn fields(&self, from: &Value, fields: &[String], origin: &str) -> Result<Value, String> {
        let mut v = from;
        let mut path = if origin == "." {
            String::new()
        } else {
            origin.to_string()
        };
        for f in fields {
            path.push('.');
            path.push_str(f);
            match v {
                Value::Object(m) => match m.get(f) {
                    Some(x) => v = x,
                    None => {
                        return match self.missing {
                            MissingKey::Error => {
                                Err(format!("map has no entry for key \"{f}\" ({path})"))
                            }
                            MissingKey::Zero => Ok(Value::String(String::new())),
                            MissingKey::Default => Ok(Value::Null),
                        };
                    }
                },
                Value::Null if self.missing != MissingKey::Error => return Ok(Value::Null),
                other => {
                    return Err(format!(
                        "can't evaluate field {f} in {} ({path})",
                        kind(other)
                    ));
                }
            }
        }
        Ok(v.clone())
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nil",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// Whether Go's templates take `v` as true.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
    }
}

/// `v` as Go's `fmt.Sprint` prints it.
pub fn printed(v: &Value) -> String {
    match v {
        Value::Null => NO_VALUE.into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(printed).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => format!(
            "map[{}]",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", printed(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        other => printed(other),
    }
}

fn int(v: &Value, what: &str) -> Result<i64, String> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| format!("{what}: {n} is not an integer")),
        Value::String(s) => s
            .parse()
            .map_err(|_| format!("{what}: '{s}' is not an integer")),
        other => Err(format!("{what}: {} is not an integer", printed(other))),
    }
}

fn arity(name: &str, args: &[Value], n: usize) -> Result<(), String> {
    if args.len() != n {
        return Err(format!(
            "{name} takes {n} argument{}, got {}",
            if n == 1 { "" } else { "s" },
            args.len()
        ));
    }
    Ok(())
}

fn compare(name: &str, a: &Value, b: &Value) -> Result<std::cmp::Ordering, String> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .zip(y.as_f64())
            .and_then(|(x, y)| x.partial_cmp(&y))
            .ok_or_else(|| format!("{name}: cannot compare {x} and {y}")),
        (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
        _ => Err(format!(
            "{name}: cannot compare {} and {}",
            kind(a),
            kind(b)
        )),
    }
}

fn call(name: &str, args: &[Value]) -> Result<Value, String> {
    use std::cmp::Ordering;
    let s = |i: usize| args.get(i).map(text).unwrap_or_default();
    let v = match name {
        "and" => args
            .iter()
            .find(|a| !truthy(a))
            .or(args.last())
            .cloned()
            .unwrap_or(Value::Null),
        "or" => args
            .iter()
            .find(|a| truthy(a))
            .or(args.last())
            .cloned()
            .unwrap_or(Value::Null),
        "not" => {
            arity(name, args, 1)?;
            Value::Bool(!truthy(&args[0]))
        }
        "empty" => {
            arity(name, args, 1)?;
            Value::Bool(!truthy(&args[0]))
        }
        "eq" => {
            if args.len() < 2 {
                return Err("eq takes at least 2 arguments".into());
            }
            Value::Bool(args[1..].iter().any(|b| loosely_equal(&args[0], b)))
        }
        "ne" => {
            arity(name, args, 2)?;
            Value::Bool(!loosely_equal(&args[0], &args[1]))
        }
        "lt" | "le" | "gt" | "ge" => {
            arity(name, args, 2)?;
            let o = compare(name, &args[0], &args[1])?;
            Value::Bool(match name {
                "lt" => o == Ordering::Less,
                "le" => o != Ordering::Greater,
                "gt" => o == Ordering::Greater,
                _ => o != Ordering::Less,
            })
        }
        "len" => {
            arity(name, args, 1)?;
            Value::from(match &args[0] {
                Value::String(x) => x.chars().count(),
                Value::Array(a) => a.len(),
                Value::Object(m) => m.len(),
                Value::Null => 0,
                other => return Err(format!("len of {}", kind(other))),
            })
        }
        "index" => {
            let Some((first, keys)) = args.split_first() else {
                return Err("index takes at least 1 argument".into());
            };
            let mut v = first.clone();
            for k in keys {
                v = match (&v, k) {
                    (Value::Object(m), key) => m.get(&text(key)).cloned().unwrap_or(Value::Null),
                    (Value::Array(a), key) => {
                        let i = int(key, "index")?;
                        usize::try_from(i)
                            .ok()
                            .and_then(|i| a.get(i))
                            .cloned()
                            .ok_or_else(|| format!("index out of range: {i}"))?
                    }
                    (Value::Null, _) => Value::Null,
                    (other, _) => return Err(format!("can't index {}", kind(other))),
                };
            }
            v
        }
        "default" => {
            arity(name, args, 2)?;
            if truthy(&args[1]) && args[1].as_str() != Some(NO_VALUE) {
                args[1].clone()
            } else {
                args[0].clone()
            }
        }
        "lower" => {
            arity(name, args, 1)?;
            Value::String(s(0).to_lowercase())
        }
        "upper" => {
            arity(name, args, 1)?;
            Value::String(s(0).to_uppercase())
        }
        "trim" => {
            arity(name, args, 1)?;
            Value::String(s(0).trim().into())
        }
        "trimPrefix" => {
            arity(name, args, 2)?;
            let (p, x) = (s(0), s(1));
            Value::String(x.strip_prefix(p.as_str()).unwrap_or(&x).into())
        }
        "trimSuffix" => {
            arity(name, args, 2)?;
            let (p, x) = (s(0), s(1));
            Value::String(x.strip_suffix(p.as_str()).unwrap_or(&x).into())
        }
        "hasPrefix" => {
            arity(name, args, 2)?;
            Value::Bool(s(1).starts_with(&s(0)))
        }
        "hasSuffix" => {
            arity(name, args, 2)?;
            Value::Bool(s(1).ends_with(&s(0)))
        }
        "contains" => {
            arity(name, args, 2)?;
            Value::Bool(s(1).contains(&s(0)))
        }
        "replace" => {
            arity(name, args, 3)?;
            let (old, new, x) = (s(0), s(1), s(2));
            let grown = new.len().saturating_sub(old.len());
            if !old.is_empty() && x.matches(&old).count().saturating_mul(grown) > MAX_OUTPUT {
                return Err(format!("replace would write more than {MAX_OUTPUT} bytes"));
            }
            if old.is_empty() {
                return Err("replace: the string to replace is empty".into());
            }
            Value::String(x.replace(&old, &new))
        }
        "trunc" => {
            arity(name, args, 2)?;
            let n = int(&args[0], "trunc")?;
            let x = s(1);
            let count = x.chars().count();
            let n_abs = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
            Value::String(if n >= 0 {
                x.chars().take(n_abs).collect()
            } else {
                x.chars().skip(count.saturating_sub(n_abs)).collect()
            })
        }
        "join" => {
            arity(name, args, 2)?;
            let parts: Vec<String> = match &args[1] {
                Value::Array(a) => a.iter().map(text).collect(),
                other => vec![text(other)],
            };
            Value::String(parts.join(&s(0)))
        }
        "quote" => Value::String(
            args.iter()
                .map(|a| quoted(&text(a), '"'))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        "squote" => Value::String(
            args.iter()
                .map(|a| format!("'{}'", text(a)))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        "normalize" => {
            arity(name, args, 1)?;
            Value::String(normalized(&s(0)))
        }
        "toJson" => {
            arity(name, args, 1)?;
            Value::String(serde_json::to_string(&args[0]).map_err(|e| e.to_string())?)
        }
        "toYaml" => {
            arity(name, args, 1)?;
            let y = serde_saphyr::to_string(&args[0]).map_err(|e| format!("toYaml: {e}"))?;
            Value::String(y.strip_suffix('\n').unwrap_or(&y).to_string())
        }
        "print" => Value::String(args.iter().map(printed).collect::<Vec<_>>().join("")),
        "printf" => {
            let Some((format, rest)) = args.split_first() else {
                return Err("printf takes a format".into());
            };
            Value::String(printf(&text(format), rest)?)
        }
        other => return Err(format!("function '{other}' is not supported")),
    };
    Ok(v)
}

/// A name as Argo CD normalizes it (`nameNormalized`, `path.basenameNormalized`): lower case,
/// every character other than `a-z`, `0-9`, `-` and `.` made `-`, at most 253 characters, no
/// `-` or `.` at either end.
pub fn normalized(name: &str) -> String {
    let mapped: String = name
        .to_lowercase()
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            _ => '-',
        })
        .take(253)
        .collect();
    mapped.trim_matches(|c| c == '-' || c == '.').to_string()
}

/// Equality as Go's `eq` reads it across JSON's number types (1 and 1.0 are equal).
fn loosely_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn quoted(s: &str, q: char) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push(q);
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(q);
    out
}

/// Go's `fmt.Sprintf` for `%s`, `%v`, `%d`, `%q` and `%%`.
fn printf(format: &str, args: &[Value]) -> Result<String, String> {
    let mut out = String::new();
    let mut next = args.iter();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some(verb @ ('s' | 'v' | 'd' | 'q')) => {
                let Some(arg) = next.next() else {
                    let _ = write!(out, "%!{verb}(MISSING)");
                    continue;
                };
                match verb {
                    'q' => out.push_str(&quoted(&text(arg), '"')),
                    'd' => out.push_str(&int(arg, "printf %d")?.to_string()),
                    _ => out.push_str(&printed(arg)),
                }
            }
            other => {
                return Err(format!(
                    "printf: verb %{} is not supported (%s %v %d %q %%)",
                    other.map(String::from).unwrap_or_default()
                ));
            }
        }
        if out.len() > MAX_OUTPUT {
            return Err(format!("printf wrote more than {MAX_OUTPUT} bytes"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(src: &str, data: Value) -> Result<String, String> {
        parse(src)?.render(&data, MissingKey::Default)
    }

    #[test]
    fn fields_pipelines_and_functions() {
        let data =
            json!({"name": "Spoke-A", "metadata": {"labels": {"env": "dev"}}, "values": {"n": 3}});
        let cases = [
            ("{{ .name }}", "Spoke-A"),
            (
                "{{.metadata.labels.env}}-{{ .name | lower }}",
                "dev-spoke-a",
            ),
            ("{{ index .metadata.labels \"env\" }}", "dev"),
            ("{{ .missing | default \"x\" }}", "x"),
            ("{{ .name | replace \"-\" \"_\" | upper }}", "SPOKE_A"),
            ("{{ trunc 3 .name }}|{{ trunc -1 .name }}", "Spo|A"),
            ("{{ .name | quote }}", "\"Spoke-A\""),
            ("{{ printf \"%s-%d\" .name .values.n }}", "Spoke-A-3"),
            (
                "{{ if eq .metadata.labels.env \"dev\" }}d{{ else if true }}x{{ else }}y{{ end }}",
                "d",
            ),
            (
                "{{ range $k, $v := .metadata.labels }}{{ $k }}={{ $v }};{{ end }}",
                "env=dev;",
            ),
            ("{{ range .none }}x{{ else }}empty{{ end }}", "empty"),
            ("{{ with .metadata.labels }}{{ .env }}{{ end }}", "dev"),
            ("a  {{- \"b\" -}}  c", "abc"),
            ("{{/* a comment */}}z", "z"),
            ("{{ $x := .name }}{{ $x }}", "Spoke-A"),
            ("{{ .metadata.labels | toYaml }}", "env: dev"),
            ("{{ .missing }}", "<no value>"),
            ("{{ (index .metadata \"labels\").env }}", "dev"),
            ("{{ normalize \"My_Cluster\" }}", "my-cluster"),
        ];
        for (src, want) in cases {
            assert_eq!(render(src, data.clone()).as_deref(), Ok(want), "{src}");
        }
    }

    #[test]
    fn missing_keys_fail_when_asked() {
        let t = parse("{{ .metadata.labels.team }}").unwrap();
        let data = json!({"metadata": {"labels": {}}});
        let e = t.render(&data, MissingKey::Error).unwrap_err();
        assert!(e.contains("no entry for key \"team\""), "{e}");
        assert_eq!(t.render(&data, MissingKey::Zero).unwrap(), "");
    }

    #[test]
    fn unknown_functions_and_bad_syntax_are_named() {
        for (src, says) in [
            ("{{ .a | env }}", "function 'env' is not supported"),
            ("{{ exec \"ls\" }}", "function 'exec' is not supported"),
            ("{{ if .a }}x", "has no {{end}}"),
            ("{{ .a ", "not closed"),
            ("{{ end }}", "unexpected {{end}}"),
            ("{{ template \"x\" }}", "not supported"),
        ] {
            let e = parse(src).map(|_| ()).unwrap_err();
            assert!(e.contains(says), "{src}: {e}");
        }
    }

    #[test]
    fn hostile_templates_are_bounded() {
        // Nesting: refused at parse time.
        let deep = "{{ if true }}".repeat(MAX_DEPTH + 2);
        assert!(parse(&deep).unwrap_err().contains("nested deeper"));
        // Work: a range over a large number stops at the step budget.
        let e = render(
            "{{ range 100000000 }}{{ range 1000 }}x{{ end }}{{ end }}",
            json!({}),
        )
        .unwrap_err();
        assert!(e.contains("steps") || e.contains("bytes"), "{e}");
        // Output: replace that would blow up is refused before it runs.
        let big = "a".repeat(100_000);
        let e = render(
            "{{ replace \"a\" .b .s }}",
            json!({"s": big, "b": "b".repeat(100)}),
        )
        .unwrap_err();
        assert!(e.contains("more than"), "{e}");
    }
}
