//! Just enough of a Kconfig reader to explain why an option was dropped:
//! each symbol's `depends on` (plus those of enclosing `if`, `menu` and
//! `choice` blocks), whether it has a prompt, and who `select`s it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::inputs::kernel::KernelError;

/// One `config`/`menuconfig` definition of a symbol (a symbol can have several).
#[derive(Debug, Clone, Default)]
pub struct Definition {
    pub file: PathBuf,
    pub line: usize,
    /// All conditions that must hold for the entry to be settable.
    pub depends: Vec<Expr>,
    pub has_prompt: bool,
    /// Symbols this entry selects (reverse dependencies of those symbols).
    pub selects: Vec<String>,
}

#[derive(Debug, Default)]
pub struct Kconfig {
    pub defs: BTreeMap<String, Vec<Definition>>,
}

impl Kconfig {
    /// Read `Kconfig` under `srctree`, following `source` lines.
    pub fn load(srctree: &Path, srcarch: &str) -> Result<Self, KernelError> {
        let mut kc = Kconfig::default();
        let mut p = Parser {
            srctree,
            srcarch,
            kc: &mut kc,
            conds: Vec::new(),
        };
        p.file(Path::new("Kconfig"), true)?;
        Ok(kc)
    }

    /// Symbols whose definitions `select` `symbol`.
    pub fn selectors(&self, symbol: &str) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .defs
            .iter()
            .filter(|(_, defs)| defs.iter().any(|d| d.selects.iter().any(|s| s == symbol)))
            .map(|(name, _)| name.as_str())
            .collect();
        out.dedup();
        out
    }
}

/// A block that conditions the entries inside it.
#[derive(Debug)]
enum Block {
    If(Expr),
    Menu(Vec<Expr>),
    Choice(Vec<Expr>),
}

/// What the last keyword opened: where `depends on` lines go.
enum Current {
    None,
    Entry(String, Definition),
    /// A `menu` or `choice` header (its `depends on` apply to the block).
    BlockHeader,
    /// A `comment` and other entries whose properties we ignore.
    Ignored,
}

struct Parser<'a> {
    srctree: &'a Path,
    srcarch: &'a str,
    kc: &'a mut Kconfig,
    conds: Vec<Block>,
}

impl Parser<'_> {
    fn file(&mut self, rel: &Path, required: bool) -> Result<(), KernelError> {
        let path = self.srctree.join(rel);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(KernelError::io(&path, e)),
        };
        let mut cur = Current::None;
        let mut lines = logical_lines(&text).into_iter().peekable();
        while let Some((lineno, line)) = lines.next() {
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let (kw, rest) = split_keyword(trimmed);
            match kw {
                "config" | "menuconfig" => {
                    self.finish(&mut cur);
                    let def = Definition {
                        file: rel.to_path_buf(),
                        line: lineno,
                        depends: self.enclosing(),
                        ..Definition::default()
                    };
                    cur = Current::Entry(rest.trim().to_string(), def);
                }
                "choice" => {
                    self.finish(&mut cur);
                    self.conds.push(Block::Choice(Vec::new()));
                    cur = Current::BlockHeader;
                }
                "endchoice" | "endmenu" | "endif" => {
                    self.finish(&mut cur);
                    self.conds.pop();
                }
                "menu" => {
                    self.finish(&mut cur);
                    self.conds.push(Block::Menu(Vec::new()));
                    cur = Current::BlockHeader;
                }
                "if" => {
                    self.finish(&mut cur);
                    self.conds.push(Block::If(Expr::parse(rest)));
                }
                "comment" | "mainmenu" => {
                    self.finish(&mut cur);
                    cur = Current::Ignored;
                }
                "source" | "osource" | "rsource" | "orsource" => {
                    self.finish(&mut cur);
                    let target = rest
                        .trim()
                        .trim_matches('"')
                        .replace("$(SRCARCH)", self.srcarch);
                    let target = if kw.starts_with('r') || kw == "orsource" {
                        rel.parent().unwrap_or(Path::new("")).join(target)
                    } else {
                        PathBuf::from(target)
                    };
                    // Sources using other macros (e.g. UML's) are not for this arch.
                    let optional = kw.starts_with('o') || target.to_string_lossy().contains("$(");
                    self.file(&target, !optional)?;
                }
                "help" | "---help---" => skip_help(&mut lines),
                "depends" => {
                    let expr = Expr::parse(rest.trim_start().strip_prefix("on").unwrap_or(rest));
                    match &mut cur {
                        Current::Entry(_, def) => def.depends.push(expr),
                        Current::BlockHeader => self.push_block_dep(expr),
                        Current::None | Current::Ignored => {}
                    }
                }
                "visible" => {
                    if let (Current::BlockHeader, Some(cond)) =
                        (&cur, rest.trim_start().strip_prefix("if"))
                    {
                        self.push_block_dep(Expr::parse(cond));
                    }
                }
                "select" => {
                    if let Current::Entry(_, def) = &mut cur
                        && let Some(sym) = rest.split_whitespace().next()
                    {
                        def.selects.push(sym.to_string());
                    }
                }
                "bool" | "tristate" | "string" | "int" | "hex" | "prompt" => {
                    if let Current::Entry(_, def) = &mut cur {
                        let (prompt, cond) = prompt_and_condition(rest);
                        if prompt {
                            def.has_prompt = true;
                            if let Some(c) = cond {
                                def.depends.push(c);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        self.finish(&mut cur);
        Ok(())
    }

    fn enclosing(&self) -> Vec<Expr> {
        let mut out = Vec::new();
        for b in &self.conds {
            match b {
                Block::If(e) => out.push(e.clone()),
                Block::Menu(v) | Block::Choice(v) => out.extend(v.iter().cloned()),
            }
        }
        out
    }

    fn push_block_dep(&mut self, expr: Expr) {
        if let Some(Block::Menu(v) | Block::Choice(v)) = self.conds.last_mut() {
            v.push(expr);
        }
    }

    fn finish(&mut self, cur: &mut Current) {
        if let Current::Entry(name, def) = std::mem::replace(cur, Current::None) {
            self.kc.defs.entry(name).or_default().push(def);
        }
    }
}

/// Lines with `\` continuations joined, numbered from 1.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let (start, mut acc) = pending.take().unwrap_or((i + 1, String::new()));
        if let Some(body) = line.strip_suffix('\\') {
            acc.push_str(body);
            pending = Some((start, acc));
        } else {
            acc.push_str(line);
            out.push((start, acc));
        }
    }
    if let Some(p) = pending {
        out.push(p);
    }
    out
}

/// Skip a help text: the lines indented deeper than the first help line.
fn skip_help<I: Iterator<Item = (usize, String)>>(lines: &mut std::iter::Peekable<I>) {
    let mut indent: Option<usize> = None;
    while let Some((_, line)) = lines.peek() {
        if line.trim().is_empty() {
            lines.next();
            continue;
        }
        let width = indent_width(line);
        match indent {
            None => indent = Some(width),
            Some(first) if width < first => return,
            Some(_) => {}
        }
        if width == 0 {
            return;
        }
        lines.next();
    }
}

fn indent_width(line: &str) -> usize {
    let mut w = 0;
    for c in line.chars() {
        match c {
            ' ' => w += 1,
            '\t' => w = (w / 8 + 1) * 8,
            _ => break,
        }
    }
    w
}

fn split_keyword(line: &str) -> (&str, &str) {
    match line.find(char::is_whitespace) {
        Some(i) => (&line[..i], &line[i..]),
        None => (line, ""),
    }
}

/// `"prompt text" if COND` -> (has prompt, condition).
fn prompt_and_condition(rest: &str) -> (bool, Option<Expr>) {
    let rest = rest.trim();
    let Some(after_quote) = rest.strip_prefix('"') else {
        return (false, None);
    };
    let Some(end) = after_quote.find('"') else {
        return (true, None);
    };
    let tail = after_quote[end + 1..].trim();
    let cond = tail.strip_prefix("if").map(Expr::parse);
    (true, cond)
}

/// A Kconfig expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Sym(String),
    /// `$(...)` macros and anything we cannot evaluate: assumed true.
    Unknown(String),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Cmp(String, String, String),
}

/// Tristate values: n=0, m=1, y=2.
pub type Tri = u8;

impl Expr {
    pub fn parse(text: &str) -> Expr {
        let toks = tokenize(text);
        let mut p = ExprParser {
            toks: &toks,
            pos: 0,
        };
        let e = p.or();
        if p.pos < toks.len() {
            Expr::Unknown(text.trim().to_string())
        } else {
            e
        }
    }

    pub fn eval(&self, cfg: &BTreeMap<String, String>) -> Tri {
        match self {
            Expr::Sym(s) => sym_tri(s, cfg),
            Expr::Unknown(_) => 2,
            Expr::Not(e) => 2 - e.eval(cfg),
            Expr::And(a, b) => a.eval(cfg).min(b.eval(cfg)),
            Expr::Or(a, b) => a.eval(cfg).max(b.eval(cfg)),
            Expr::Cmp(a, op, b) => {
                let (x, y) = (sym_value(a, cfg), sym_value(b, cfg));
                let ord = match (parse_num(&x), parse_num(&y)) {
                    (Some(i), Some(j)) => i.cmp(&j),
                    _ => x.cmp(&y),
                };
                let holds = match op.as_str() {
                    "=" => ord.is_eq(),
                    "!=" => !ord.is_eq(),
                    "<" => ord.is_lt(),
                    "<=" => ord.is_le(),
                    ">" => ord.is_gt(),
                    _ => ord.is_ge(),
                };
                if holds { 2 } else { 0 }
            }
        }
    }

    /// The smallest parts of a false expression that make it false: the
    /// failing operands of `&&`, else the expression itself.
    pub fn failing_parts<'e>(&'e self, cfg: &BTreeMap<String, String>, out: &mut Vec<&'e Expr>) {
        if self.eval(cfg) == 2 {
            return;
        }
        match self {
            Expr::And(a, b) => {
                a.failing_parts(cfg, out);
                b.failing_parts(cfg, out);
            }
            _ => out.push(self),
        }
    }

    /// Symbols named in the expression, in order, without duplicates.
    pub fn symbols(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_symbols(&mut out);
        out
    }

    fn collect_symbols<'e>(&'e self, out: &mut Vec<&'e str>) {
        let mut push = |s: &'e str| {
            if is_symbol(s) && !out.contains(&s) {
                out.push(s);
            }
        };
        match self {
            Expr::Sym(s) => push(s),
            Expr::Cmp(a, _, b) => {
                push(a);
                push(b);
            }
            Expr::Unknown(_) => {}
            Expr::Not(e) => e.collect_symbols(out),
            Expr::And(a, b) | Expr::Or(a, b) => {
                a.collect_symbols(out);
                b.collect_symbols(out);
            }
        }
    }
}

impl std::fmt::Display for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expr::Sym(s) | Expr::Unknown(s) => write!(f, "{s}"),
            Expr::Not(e) => match **e {
                Expr::Sym(_) => write!(f, "!{e}"),
                _ => write!(f, "!({e})"),
            },
            Expr::And(a, b) => write!(f, "{} && {}", paren_or(a), paren_or(b)),
            Expr::Or(a, b) => write!(f, "{a} || {b}"),
            Expr::Cmp(a, op, b) => write!(f, "{a} {op} {b}"),
        }
    }
}

fn paren_or(e: &Expr) -> String {
    match e {
        Expr::Or(..) => format!("({e})"),
        _ => e.to_string(),
    }
}

/// y/m/n constants and symbols alike; a non-tristate symbol counts as n.
fn sym_tri(s: &str, cfg: &BTreeMap<String, String>) -> Tri {
    match sym_value(s, cfg).as_str() {
        "y" => 2,
        "m" => 1,
        _ => 0,
    }
}

/// A symbol's value (`n` if unset) or a constant's text.
pub fn sym_value(s: &str, cfg: &BTreeMap<String, String>) -> String {
    if let Some(q) = s.strip_prefix('"') {
        return q.trim_end_matches('"').to_string();
    }
    if matches!(s, "y" | "m" | "n") {
        return s.to_string();
    }
    match cfg.get(s) {
        Some(v) => v.trim_matches('"').to_string(),
        None if s.bytes().all(|b| b.is_ascii_digit()) => s.to_string(),
        None => "n".to_string(),
    }
}

fn is_symbol(s: &str) -> bool {
    !matches!(s, "y" | "m" | "n") && !s.starts_with('"') && !s.bytes().all(|b| b.is_ascii_digit())
}

fn parse_num(s: &str) -> Option<i128> {
    if let Some(h) = s.strip_prefix("0x") {
        i128::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

fn tokenize(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            break; // trailing comment
        } else if c == '$' && chars.get(i + 1) == Some(&'(') {
            // Macro: up to the matching parenthesis.
            let start = i;
            let mut depth = 0;
            while i < chars.len() {
                match chars[i] {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            toks.push(chars[start..i].iter().collect());
        } else if c == '"' || c == '\'' {
            i += 1;
            let start = i;
            while i < chars.len() && chars[i] != c {
                i += 1;
            }
            let body: String = chars[start..i].iter().collect();
            i = (i + 1).min(chars.len());
            toks.push(format!("\"{body}\""));
        } else if "&|!=<>".contains(c) {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            if ["&&", "||", "!=", "<=", ">="].contains(&two.as_str()) {
                toks.push(two);
                i += 2;
            } else {
                toks.push(c.to_string());
                i += 1;
            }
        } else if c == '(' || c == ')' {
            toks.push(c.to_string());
            i += 1;
        } else {
            let start = i;
            while i < chars.len() && !chars[i].is_whitespace() && !"&|!=<>()\"'#".contains(chars[i])
            {
                i += 1;
            }
            toks.push(chars[start..i].iter().collect());
        }
    }
    toks
}

struct ExprParser<'t> {
    toks: &'t [String],
    pos: usize,
}

impl ExprParser<'_> {
    fn peek(&self) -> Option<&str> {
        self.toks.get(self.pos).map(String::as_str)
    }

    fn or(&mut self) -> Expr {
        let mut left = self.and();
        while self.peek() == Some("||") {
            self.pos += 1;
            let right = self.and();
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        left
    }

    fn and(&mut self) -> Expr {
        let mut left = self.unary();
        while self.peek() == Some("&&") {
            self.pos += 1;
            let right = self.unary();
            left = Expr::And(Box::new(left), Box::new(right));
        }
        left
    }

    fn unary(&mut self) -> Expr {
        match self.peek() {
            Some("!") => {
                self.pos += 1;
                Expr::Not(Box::new(self.unary()))
            }
            Some("(") => {
                self.pos += 1;
                let e = self.or();
                if self.peek() == Some(")") {
                    self.pos += 1;
                }
                e
            }
            _ => self.atom(),
        }
    }

    fn atom(&mut self) -> Expr {
        let Some(tok) = self.peek().map(str::to_string) else {
            return Expr::Unknown(String::new());
        };
        self.pos += 1;
        if tok.starts_with("$(") {
            return Expr::Unknown(tok);
        }
        if let Some(op) = self.peek().map(str::to_string)
            && ["=", "!=", "<", "<=", ">", ">="].contains(&op.as_str())
        {
            self.pos += 1;
            let rhs = self.peek().map(str::to_string).unwrap_or_default();
            self.pos += 1;
            return Expr::Cmp(tok, op, rhs);
        }
        Expr::Sym(tok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn expressions_evaluate_as_tristate() {
        let c = cfg(&[("A", "y"), ("B", "m"), ("V", "124")]);
        assert_eq!(Expr::parse("A && B").eval(&c), 1);
        assert_eq!(Expr::parse("A && !C").eval(&c), 2);
        assert_eq!(Expr::parse("C || B").eval(&c), 1);
        assert_eq!(Expr::parse("(C || A) && V >= 116").eval(&c), 2);
        assert_eq!(Expr::parse("V < 116").eval(&c), 0);
        assert_eq!(Expr::parse("A = y").eval(&c), 2);
        assert_eq!(Expr::parse("$(cc-option,-mfoo)").eval(&c), 2);
        assert_eq!(Expr::parse("!64BIT # comment").eval(&c), 2);
    }

    #[test]
    fn failing_parts_split_conjunctions() {
        let c = cfg(&[("A", "y")]);
        let e = Expr::parse("A && B && (C || D)");
        let mut parts = Vec::new();
        e.failing_parts(&c, &mut parts);
        let shown: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
        assert_eq!(shown, vec!["B", "C || D"]);
        assert_eq!(e.symbols(), vec!["A", "B", "C", "D"]);
    }

    #[test]
    fn reads_blocks_help_and_sources() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("arch/x86")).unwrap();
        std::fs::write(
            root.join("Kconfig"),
            "mainmenu \"t\"\nsource \"arch/$(SRCARCH)/Kconfig\"\n\
             menuconfig MENU\n\tbool \"menu\"\n\nif MENU\n\
             config INNER\n\ttristate \"inner\"\n\tdepends on PCI \\\n\t\t&& NET\n\thelp\n\t  depends on HELPTEXT\n\n\t  more\n\
             endif\n\
             menu \"m\"\n\tdepends on BLOCK\n\
             config IN_MENU\n\tbool \"x\" if EXPERT\n\tselect INNER\nendmenu\n\
             comment \"c\"\n\tdepends on NOTME\n\
             config HIDDEN\n\tbool\n",
        )
        .unwrap();
        std::fs::write(root.join("arch/x86/Kconfig"), "config PCI\n\tdef_bool y\n").unwrap();
        let kc = Kconfig::load(root, "x86").unwrap();
        let inner = &kc.defs["INNER"][0];
        let deps: Vec<String> = inner.depends.iter().map(|e| e.to_string()).collect();
        assert_eq!(deps, vec!["MENU", "PCI && NET"]);
        assert!(inner.has_prompt);
        assert_eq!(inner.line, 7);
        let in_menu = &kc.defs["IN_MENU"][0];
        let deps: Vec<String> = in_menu.depends.iter().map(|e| e.to_string()).collect();
        assert_eq!(deps, vec!["BLOCK", "EXPERT"]);
        assert!(!kc.defs["HIDDEN"][0].has_prompt);
        assert!(kc.defs["HIDDEN"][0].depends.is_empty());
        assert!(kc.defs.contains_key("PCI"));
        assert_eq!(kc.selectors("INNER"), vec!["IN_MENU"]);
    }
}
