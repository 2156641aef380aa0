//! Imports flow one way: every `crate::…` path in `orchestrator/src` names a
//! module of the file's own layer or of a lower one. The layers are the
//! `//! - NAME: modules` lines of `src/lib.rs` (the one table; the README
//! repeats it and is checked against it). Boots nothing; reads files only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One `crate::` path found in a file.
#[derive(Debug, PartialEq)]
struct Import {
    line: usize,
    /// The path as written, `crate::` (or the `super::` chain) included; for
    /// a grouped `use`, the member: `crate::{a, b::c}` gives `crate::a` and
    /// `crate::b::c`.
    path: String,
    /// Its first segment: the top-level module it reaches into.
    module: String,
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Layer names, lowest first, each with its modules, from lib.rs's doc.
fn layer_table(lib_rs: &str) -> Vec<(String, Vec<String>)> {
    lib_rs
        .lines()
        .filter_map(|l| l.strip_prefix("//! - "))
        .filter_map(|l| l.split_once(": "))
        .map(|(name, mods)| {
            let mods = mods
                .trim_end_matches('.')
                .split(',')
                .map(|m| m.trim().trim_matches('`').to_string())
                .collect();
            (name.to_string(), mods)
        })
        .collect()
}

/// The top-level modules lib.rs declares (`pub mod x;` / `mod x;`).
fn declared_modules(lib_rs: &str) -> Vec<String> {
    lib_rs
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

/// The source with comments and the insides of string and char literals
/// blanked (newlines kept, so byte offsets and line numbers stay true).
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if c[i] == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&c, i) {
            // Raw string: r"…" or r#"…"#.
            let mut j = i + 1;
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            (i..=j).for_each(|_| out.push(' '));
            i = j + 1;
            while i < c.len() {
                if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
                    (0..=hashes).for_each(|_| out.push(' '));
                    i += hashes + 1;
                    break;
                }
                out.push(blank(c[i]));
                i += 1;
            }
        } else if c[i] == '"' {
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if let Some(&ch) = c.get(i) {
                    out.push(blank(ch));
                }
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else if c[i] == '\'' && (next == Some('\\') || c.get(i + 2) == Some(&'\'')) {
            // A char literal ('x', '\n', '\''); a lifetime ('a) has no closing quote.
            out.push(' ');
            i += 1;
            if c.get(i) == Some(&'\\') {
                out.push(' ');
                i += 1;
            }
            while i < c.len() && c[i] != '\'' {
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

fn is_ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

fn ident_before(c: &[char], i: usize) -> bool {
    i > 0 && is_ident(c[i - 1])
}

/// For each char of `code`, how many inline `mod name { … }` blocks are open.
fn mod_nesting(code: &[char]) -> Vec<usize> {
    let mut out = Vec::with_capacity(code.len());
    let (mut depth, mut opened, mut pending) = (0usize, Vec::new(), false);
    for (i, &ch) in code.iter().enumerate() {
        if code[i..].starts_with(&['m', 'o', 'd'])
            && !ident_before(code, i)
            && !code.get(i + 3).is_some_and(|&c| is_ident(c))
        {
            pending = true;
        }
        match ch {
            '{' => {
                depth += 1;
                if pending {
                    opened.push(depth);
                    pending = false;
                }
            }
            '}' => {
                if opened.last() == Some(&depth) {
                    opened.pop();
                }
                depth = depth.saturating_sub(1);
            }
            ';' => pending = false,
            _ => {}
        }
        out.push(opened.len());
    }
    out
}

/// Every path from the crate root in `src`, a file `file_depth` modules
/// below the root: `crate::` in `use` lines, grouped `use crate::{…}`
/// (nested and over several lines), and inline in code; and a `super::`
/// chain that climbs to the root.
fn crate_paths(src: &str, file_depth: usize) -> Vec<Import> {
    let code: Vec<char> = code_only(src).chars().collect();
    let nesting = mod_nesting(&code);
    let line_of = |at: usize| code[..at].iter().filter(|&&ch| ch == '\n').count() + 1;
    let crate_key: Vec<char> = "crate::".chars().collect();
    let super_key: Vec<char> = "super::".chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < code.len() {
        if ident_before(&code, i) || (i > 0 && matches!(code[i - 1], '$' | ':')) {
            i += 1;
            continue;
        }
        let mut j = i;
        if code[i..].starts_with(&crate_key) {
            j += crate_key.len();
        } else {
            let mut climbs = 0;
            while code[j..].starts_with(&super_key) {
                climbs += 1;
                j += super_key.len();
            }
            if climbs == 0 || climbs != file_depth + nesting[i] {
                i = j.max(i + 1);
                continue;
            }
        }
        let prefix: String = code[i..j].iter().collect();
        while code.get(j).is_some_and(|ch| ch.is_whitespace()) {
            j += 1;
        }
        // `crate::{…}` or `crate::a::b::{…}`: the path's head before the
        // group, then each member after it.
        let head_end = (j..code.len())
            .find(|&k| !(is_ident(code[k]) || code[k] == ':'))
            .unwrap_or(code.len());
        let head: String = code[j..head_end].iter().collect();
        if code.get(head_end) == Some(&'{') && (head.is_empty() || head.ends_with("::")) {
            // The group's members, split at its top-level commas.
            let mut depth = 0;
            let mut member_start = head_end + 1;
            let mut k = head_end;
            while k < code.len() {
                match code[k] {
                    '{' => depth += 1,
                    '}' | ',' if depth == 1 => {
                        let member: String = code[member_start..k].iter().collect();
                        let at = member_start + member.len() - member.trim_start().len();
                        if !member.trim().is_empty() {
                            push_path(
                                &mut found,
                                line_of(at),
                                &prefix,
                                &format!("{head}{}", member.trim()),
                            );
                        }
                        member_start = k + 1;
                        if code[k] == '}' {
                            break;
                        }
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
                k += 1;
            }
            i = k + 1;
        } else {
            push_path(&mut found, line_of(i), &prefix, head.trim_end_matches(':'));
            i = head_end;
        }
    }
    found
}

fn push_path(found: &mut Vec<Import>, line: usize, prefix: &str, rest: &str) {
    let module: String = rest.chars().take_while(|&ch| is_ident(ch)).collect();
    if module.is_empty() || module == "self" {
        return;
    }
    let path: String = rest.split_whitespace().collect::<Vec<_>>().join(" ");
    found.push(Import {
        line,
        path: format!("{prefix}{path}"),
        module,
    });
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Where a file stands: its layer folder and the top-level module it
/// belongs to (`inputs/image/rootfs/build.rs` → `inputs`, `image`); None
/// for the crate roots and a layer's own `mod.rs`.
fn place_of(rel: &Path) -> Option<(String, String)> {
    let mut parts = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    let folder = parts.next()?;
    let module = parts.next()?;
    if module == "mod.rs" && parts.next().is_none() {
        return None;
    }
    Some((folder, module.trim_end_matches(".rs").to_string()))
}

/// How many modules below the crate root a file's module is
/// (`planning/plan.rs` 2, `inputs/image/mod.rs` 2,
/// `inputs/image/rootfs/build.rs` 4).
fn file_depth(rel: &Path) -> usize {
    let n = rel.components().count();
    if rel.file_name().is_some_and(|f| f == "mod.rs") {
        n - 1
    } else {
        n
    }
}

/// The imports in `files` (relative path, source) that break the layering,
/// one message each: a file outside its layer's folder, a module in no
/// layer, an import from a higher layer.
fn upward_imports(table: &[(String, Vec<String>)], files: &[(PathBuf, String)]) -> Vec<String> {
    let layer: BTreeMap<&str, (usize, &str)> = table
        .iter()
        .enumerate()
        .flat_map(|(n, (name, mods))| mods.iter().map(move |m| (m.as_str(), (n, name.as_str()))))
        .collect();
    let layer_names: Vec<&str> = table.iter().map(|(name, _)| name.as_str()).collect();
    let mut errors = Vec::new();
    for (rel, src) in files {
        if matches!(rel.to_str(), Some("lib.rs" | "main.rs")) {
            continue;
        }
        let Some((folder, me)) = place_of(rel) else {
            if !rel
                .parent()
                .is_some_and(|p| layer_names.iter().any(|l| p == Path::new(l)))
            {
                errors.push(format!("src/{}: not in a layer's folder", rel.display()));
            }
            continue;
        };
        let Some(&(mine, my_name)) = layer.get(me.as_str()) else {
            errors.push(format!(
                "src/{}: module `{me}` is in no layer",
                rel.display()
            ));
            continue;
        };
        if folder != my_name {
            errors.push(format!(
                "src/{}: module `{me}` is in layer {my_name}, so it belongs in src/{my_name}/",
                rel.display()
            ));
        }
        for imp in crate_paths(src, file_depth(rel)) {
            // `crate::LAYER::MODULE…`: the layer, then the module in it.
            let Some(claimed) = layer_names.iter().position(|l| *l == imp.module) else {
                errors.push(format!(
                    "src/{}:{}: `{}`: name the module's layer (`crate::LAYER::{}`)",
                    rel.display(),
                    imp.line,
                    imp.path,
                    imp.module
                ));
                continue;
            };
            let after = imp
                .path
                .split("::")
                .skip_while(|seg| *seg != imp.module)
                .nth(1)
                .map(|seg| {
                    seg.chars()
                        .take_while(|&ch| is_ident(ch))
                        .collect::<String>()
                })
                .unwrap_or_default();
            if after.is_empty() {
                // `use crate::host;` or `crate::host::{…}`: a group names
                // its modules one by one (crate_paths splits them).
                continue;
            }
            match layer.get(after.as_str()) {
                None => errors.push(format!(
                    "src/{}:{}: `{}`: module `{after}` is in no layer",
                    rel.display(),
                    imp.line,
                    imp.path,
                )),
                Some(&(theirs, _)) if theirs != claimed => errors.push(format!(
                    "src/{}:{}: `{}`: module `{after}` is not in layer {}",
                    rel.display(),
                    imp.line,
                    imp.path,
                    imp.module
                )),
                Some(&(theirs, their_name)) if theirs > mine => errors.push(format!(
                    "src/{}:{}: `{}`: {me} (layer {my_name}) imports {after} (layer {their_name}), a higher layer",
                    rel.display(),
                    imp.line,
                    imp.path,
                )),
                Some(_) => {}
            }
        }
    }
    errors
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn no_module_imports_from_a_higher_layer() {
    let src = src_dir();
    let table = layer_table(&read(&src.join("lib.rs")));
    assert!(table.len() >= 5, "lib.rs's layer table: {table:?}");
    let mut paths = Vec::new();
    rs_files(&src, &mut paths);
    let files: Vec<(PathBuf, String)> = paths
        .iter()
        .map(|p| (p.strip_prefix(&src).unwrap().to_path_buf(), read(p)))
        .collect();
    let errors = upward_imports(&table, &files);
    assert!(
        errors.is_empty(),
        "imports from a higher layer (layers: src/lib.rs):\n{}",
        errors.join("\n")
    );
}

#[test]
fn every_module_is_in_exactly_one_layer() {
    let src = src_dir();
    let lib_rs = read(&src.join("lib.rs"));
    let table = layer_table(&lib_rs);
    let mut listed: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, mods) in &table {
        for m in mods {
            listed.entry(m.as_str()).or_default().push(name.as_str());
        }
    }
    let twice: Vec<_> = listed.iter().filter(|(_, l)| l.len() > 1).collect();
    assert!(twice.is_empty(), "in more than one layer: {twice:?}");
    // rustfmt sorts `mod` lines, so the order is the table's alone.
    let mut names: Vec<&str> = table.iter().map(|(name, _)| name.as_str()).collect();
    let mut declared = declared_modules(&lib_rs);
    names.sort();
    declared.sort();
    assert_eq!(declared, names, "lib.rs declares the layers' folders");
    for (name, mods) in &table {
        let mut declared = declared_modules(&read(&src.join(name).join("mod.rs")));
        let mut want = mods.clone();
        declared.sort();
        want.sort();
        assert_eq!(
            declared, want,
            "src/{name}/mod.rs declares the modules lib.rs's table gives layer {name}"
        );
    }
}

#[test]
fn readme_lists_the_same_layers() {
    let lib_rs = read(&src_dir().join("lib.rs"));
    let readme = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"));
    let lines: Vec<&str> = lib_rs
        .lines()
        .filter_map(|l| l.strip_prefix("//! - "))
        .collect();
    let missing: Vec<&&str> = lines
        .iter()
        .filter(|l| !readme.lines().any(|r| r.strip_prefix("- ") == Some(**l)))
        .collect();
    assert!(
        missing.is_empty(),
        "README.md's layout lacks these layer lines of lib.rs: {missing:?}"
    );
}

/// Asserts the (line, path, module) of each import found, in order.
fn assert_finds(got: Vec<Import>, want: &[(usize, &str, &str)]) {
    let got: Vec<(usize, &str, &str)> = got
        .iter()
        .map(|i| (i.line, i.path.as_str(), i.module.as_str()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn finds_paths_in_every_form() {
    let src = "use crate::a::B;\n\
               use crate::{c, d::{E, F},\n    g};\n\
               // crate::commented\n\
               fn f() { let s = \"crate::quoted\"; crate::h::i(s); '\"'; x::crate::j; }\n\
               pub(crate) fn k<'a>(_: &'a str) { $crate::macro_path; crate :: not_a_path; }\n\
               /* crate::blocked */ const C: &str = r#\"crate::raw\"#; use crate::l;\n\
               use crate::m::{n, o::P};\n";
    assert_finds(
        crate_paths(src, 1),
        &[
            (1, "crate::a::B", "a"),
            (2, "crate::c", "c"),
            (2, "crate::d::{E, F}", "d"),
            (3, "crate::g", "g"),
            (5, "crate::h::i", "h"),
            (7, "crate::l", "l"),
            (8, "crate::m::n", "m"),
            (8, "crate::m::o::P", "m"),
        ],
    );
}

#[test]
fn finds_super_chains_that_reach_the_root() {
    // A file two modules down (a/b.rs): super::super climbs to the root,
    // and one more super:: per inline mod it stands in.
    let src = "use super::sibling::X;\n\
               use super::super::{top, other::Y};\n\
               mod tests {\n    use super::*;\n    use super::super::super::up::Z;\n}\n\
               fn f() { super::super::inline::g(); }\n";
    assert_finds(
        crate_paths(src, 2),
        &[
            (2, "super::super::top", "top"),
            (2, "super::super::other::Y", "other"),
            (5, "super::super::super::up::Z", "up"),
            (7, "super::super::inline::g", "inline"),
        ],
    );
    assert_eq!(file_depth(Path::new("a/b.rs")), 2);
    assert_eq!(file_depth(Path::new("a/mod.rs")), 1);
}

#[test]
fn an_upward_import_is_named_with_its_file_and_line() {
    let table = layer_table("//! - low: a\n//! - high: b, c\n");
    let files = [
        (
            PathBuf::from("low/a/x.rs"),
            "use crate::low::a::y;\nfn f() { crate::high::b::g() }\n".to_string(),
        ),
        (
            PathBuf::from("high/b.rs"),
            "use crate::{low::a, high::c::Z};\nuse crate::a;\nuse crate::high::{c, a};\n"
                .to_string(),
        ),
        (PathBuf::from("low/mod.rs"), String::new()),
        (PathBuf::from("high/d.rs"), String::new()),
        (PathBuf::from("low/c.rs"), String::new()),
        (PathBuf::from("e.rs"), String::new()),
    ]
    .to_vec();
    assert_eq!(
        upward_imports(&table, &files),
        [
            "src/low/a/x.rs:2: `crate::high::b::g`: a (layer low) imports b (layer high), a higher layer",
            "src/high/b.rs:2: `crate::a`: name the module's layer (`crate::LAYER::a`)",
            "src/high/b.rs:3: `crate::high::a`: module `a` is not in layer high",
            "src/high/d.rs: module `d` is in no layer",
            "src/low/c.rs: module `c` is in layer high, so it belongs in src/high/",
            "src/e.rs: not in a layer's folder",
        ]
    );
}

/// `code` (comments and strings already blanked) with the items under
/// `#[cfg(test)]` (or a `cfg` naming `test` among others) blanked too: a crate's tests may reach any of its
/// modules.
fn without_test_items(code: &str) -> String {
    let c: Vec<char> = code.chars().collect();
    let key: Vec<char> = "#[cfg(".chars().collect();
    let mut out = c.clone();
    let mut i = 0;
    while i < c.len() {
        // `#[cfg(test)]`, `#[cfg(all(test, …))]`: an attribute naming test.
        let attr_end = c[i..]
            .starts_with(&key)
            .then(|| (i..c.len()).find(|&k| c[k] == ']').unwrap_or(c.len()));
        let Some(attr_end) = attr_end.filter(|&e| {
            let attr: String = c[i..e].iter().collect();
            !attr.contains("not(") && attr.split(|ch: char| !is_ident(ch)).any(|w| w == "test")
        }) else {
            i += 1;
            continue;
        };
        // The item the attribute is on: up to its `;`, or its braces.
        let mut j = attr_end;
        while j < c.len() && c[j] != '{' && c[j] != ';' {
            j += 1;
        }
        let mut end = j;
        if c.get(j) == Some(&'{') {
            let mut depth = 0;
            while end < c.len() {
                match c[end] {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                end += 1;
            }
        }
        for ch in out.iter_mut().take(end + 1).skip(i) {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        i = end + 1;
    }
    out.into_iter().collect()
}

/// The top-level module a file of a crate without layer folders belongs
/// to (`a.rs`, `a/mod.rs` and `a/b.rs` → `a`).
fn top_module(rel: &Path) -> Option<String> {
    rel.components().next().map(|c| {
        c.as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string()
    })
}

fn is_crate_root(rel: &Path) -> bool {
    matches!(rel.to_str(), Some("lib.rs" | "main.rs"))
}

/// The top-level modules of the crate whose sources are `files` (path
/// relative to its `src`, source), each with the others its code (not its
/// tests) names by a path from the crate root.
fn module_graph(
    files: &[(PathBuf, String)],
) -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let top = top_module;
    let roots = is_crate_root;
    let mut graph: BTreeMap<String, std::collections::BTreeSet<String>> = files
        .iter()
        .filter(|(rel, _)| !roots(rel))
        .filter_map(|(rel, _)| top(rel))
        .map(|m| (m, Default::default()))
        .collect();
    for (rel, src) in files.iter().filter(|(rel, _)| !roots(rel)) {
        let Some(me) = top(rel) else { continue };
        let code = without_test_items(&code_only(src));
        for import in crate_paths(&code, file_depth(rel)) {
            if import.module != me && graph.contains_key(&import.module) {
                graph.get_mut(&me).unwrap().insert(import.module);
            }
        }
    }
    graph
}

/// The import loops of `graph`: each set of two or more modules that
/// reach one another, sorted.
fn import_loops(graph: &BTreeMap<String, std::collections::BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for next in &graph[&m] {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, std::collections::BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut loops: Vec<Vec<String>> = Vec::new();
    for m in graph.keys() {
        if loops.iter().any(|l| l.contains(m)) {
            continue;
        }
        let mut l: Vec<String> = graph
            .keys()
            .filter(|o| *o == m || (reaches[m].contains(*o) && reaches[o].contains(m)))
            .cloned()
            .collect();
        if l.len() > 1 {
            l.sort();
            loops.push(l);
        }
    }
    loops
}

fn crate_files(src: &Path) -> Vec<(PathBuf, String)> {
    let mut paths = Vec::new();
    rs_files(src, &mut paths);
    paths
        .into_iter()
        .map(|p| (p.strip_prefix(src).unwrap().to_path_buf(), read(&p)))
        .collect()
}

#[test]
fn no_guest_crate_has_an_import_loop_between_its_modules() {
    let mut found = Vec::new();
    for (krate, _) in GUEST_CRATES {
        let files = crate_files(&guest_dir().join(krate));
        assert!(!files.is_empty(), "guest-agent/{krate}: no source read");
        let graph = module_graph(&files);
        for l in import_loops(&graph) {
            found.push(format!("guest-agent/{krate}: {}", l.join(" <-> ")));
        }
    }
    assert!(
        found.is_empty(),
        "modules that import one another (a loop: move what both need below them):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_planted_loop_is_found_and_a_tests_import_is_not_one() {
    let files = |b_imports_a: &str| {
        vec![
            (
                PathBuf::from("lib.rs"),
                "pub mod a; pub mod b; pub mod c;".to_string(),
            ),
            (
                PathBuf::from("a.rs"),
                "use crate::b::Thing;\npub fn f() {}\n".to_string(),
            ),
            (
                PathBuf::from("b/mod.rs"),
                format!("pub struct Thing;\n{b_imports_a}\n"),
            ),
            (
                PathBuf::from("c.rs"),
                "pub fn g() {}\n#[cfg(test)]\nmod tests {\n    use crate::a::f;\n}\n".to_string(),
            ),
            (
                PathBuf::from("b/inner.rs"),
                "// crate::c is only a comment\n".to_string(),
            ),
        ]
    };
    // b reaches back into a: one loop, named.
    let planted = import_loops(&module_graph(&files("pub fn h() { super::a::f() }")));
    assert_eq!(planted, vec![vec!["a".to_string(), "b".to_string()]]);
    // Without it, none (c's test module and b's comment do not count).
    assert!(import_loops(&module_graph(&files(""))).is_empty());
    let graph = module_graph(&files(""));
    assert!(graph["c"].is_empty() && graph["b"].is_empty(), "{graph:?}");
}

/// The guest crates, each with its source folder below guest-agent/ and
/// the file that declares its modules.
const GUEST_CRATES: [(&str, &str); 6] = [
    ("src", "lib.rs"),
    ("flight/src", "lib.rs"),
    ("asam/src", "lib.rs"),
    ("vocab/src", "lib.rs"),
    ("proc/src", "lib.rs"),
    ("odbc/src", "main.rs"),
];

fn guest_dir() -> PathBuf {
    src_dir()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("guest-agent")
}

/// A guest crate's layers, lowest first: the `//! - NAME: modules` lines
/// that follow the line of its root's doc saying "Layers, lowest first"
/// (the root's other `//! - ` lists are not layers). Empty if it has none.
fn guest_layer_table(root: &str) -> Vec<(String, Vec<String>)> {
    let lines: Vec<&str> = root
        .lines()
        .skip_while(|l| !l.contains("Layers, lowest first"))
        .skip_while(|l| !l.starts_with("//! - "))
        .take_while(|l| l.starts_with("//! - "))
        .collect();
    layer_table(&lines.join("\n"))
}

/// The imports in a guest crate's `files` (path relative to its `src`,
/// source) that break `table`'s layering, one message each: a module in no
/// layer, a path (outside test items) into a higher layer.
fn guest_upward_imports(
    krate: &str,
    table: &[(String, Vec<String>)],
    files: &[(PathBuf, String)],
) -> Vec<String> {
    let layer: BTreeMap<&str, (usize, &str)> = table
        .iter()
        .enumerate()
        .flat_map(|(n, (name, mods))| mods.iter().map(move |m| (m.as_str(), (n, name.as_str()))))
        .collect();
    let mut errors = Vec::new();
    for (rel, src) in files.iter().filter(|(rel, _)| !is_crate_root(rel)) {
        let Some(me) = top_module(rel) else { continue };
        let Some(&(mine, my_name)) = layer.get(me.as_str()) else {
            errors.push(format!(
                "{krate}/{}: module `{me}` is in no layer",
                rel.display()
            ));
            continue;
        };
        let code = without_test_items(&code_only(src));
        for imp in crate_paths(&code, file_depth(rel)) {
            if let Some(&(theirs, their_name)) = layer.get(imp.module.as_str())
                && theirs > mine
            {
                errors.push(format!(
                    "{krate}/{}:{}: `{}`: {me} (layer {my_name}) imports {} (layer {their_name}), a higher layer",
                    rel.display(),
                    imp.line,
                    imp.path,
                    imp.module
                ));
            }
        }
    }
    errors
}

#[test]
fn every_guest_crate_with_modules_has_layers_and_no_import_climbs_them() {
    let mut errors = Vec::new();
    for (krate, root) in GUEST_CRATES {
        let src = guest_dir().join(krate);
        let root_rs = read(&src.join(root));
        let table = guest_layer_table(&root_rs);
        let mut declared = declared_modules(&root_rs);
        if table.is_empty() {
            // One module cannot import a higher one: no table needed.
            assert!(
                declared.len() <= 1,
                "guest-agent/{krate}/{root}: {} modules and no \"Layers, lowest first\" table in its doc",
                declared.len()
            );
            continue;
        }
        let mut listed: Vec<String> = table.iter().flat_map(|(_, m)| m.clone()).collect();
        listed.sort();
        declared.sort();
        assert_eq!(
            listed, declared,
            "guest-agent/{krate}/{root}: its layer table lists each module it declares, once"
        );
        let files = crate_files(&src);
        errors.extend(guest_upward_imports(
            &format!("guest-agent/{krate}"),
            &table,
            &files,
        ));
    }
    assert!(
        errors.is_empty(),
        "imports from a higher layer (each crate's table: its lib.rs doc):\n{}",
        errors.join("\n")
    );
}

#[test]
fn a_planted_upward_import_in_a_guest_crate_is_named_with_its_file_and_line() {
    let root = "//! Doc.\n//! - [`a`]: not a layer\n//!\n//! Layers, lowest first:\n\
                //! - base: a\n//! - top: b, c\n\npub mod a;\npub mod b;\npub mod c;\n";
    let table = guest_layer_table(root);
    assert_eq!(
        table,
        vec![
            ("base".to_string(), vec!["a".to_string()]),
            ("top".to_string(), vec!["b".to_string(), "c".to_string()]),
        ]
    );
    let files = |a_src: &str| {
        vec![
            (PathBuf::from("lib.rs"), root.to_string()),
            (PathBuf::from("a/mod.rs"), a_src.to_string()),
            (
                PathBuf::from("b.rs"),
                "use crate::a::f;\nuse crate::c::g;\n".to_string(),
            ),
            (
                PathBuf::from("c.rs"),
                "pub fn g() {}\n#[cfg(test)]\nmod tests {\n    use crate::b;\n}\n".to_string(),
            ),
        ]
    };
    // Downward and sideways imports, and a test's, pass.
    assert_eq!(
        guest_upward_imports("k", &table, &files("pub fn f() {}\n")),
        Vec::<String>::new()
    );
    // a (base) reaching b (top), from a file below a/: named with its line.
    let mut planted = files("pub fn f() {}\n");
    planted.push((
        PathBuf::from("a/inner.rs"),
        "// crate::b in a comment\nfn h() { super::super::b::x() }\n".to_string(),
    ));
    assert_eq!(
        guest_upward_imports("k", &table, &planted),
        vec!["k/a/inner.rs:2: `super::super::b::x`: a (layer base) imports b (layer top), a higher layer".to_string()]
    );
}
