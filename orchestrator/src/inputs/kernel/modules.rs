//! Module dependency closure and load order. A .deb carries no modules.dep
//! (depmod runs at install time), so dependencies come from each .ko's
//! `.modinfo` `depends=` field.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::modinfo::{self, normalise_name};
use super::{KernelError, ModuleFile};

/// The modules of one kernel release plus its built-in list.
pub struct ModuleTree {
    root: Option<PathBuf>,
    builtin: BTreeSet<String>,
    index: BTreeMap<String, PathBuf>,
}

/// What a module name resolves to.
pub enum Lookup {
    Builtin,
    Module { path: PathBuf, deps: Vec<String> },
}

impl ModuleTree {
    /// `root` is `lib/modules/<release>` (None for a kernel without modules);
    /// `builtin_list` is a `modules.builtin` file, if the kernel has one.
    pub fn open(root: Option<&Path>, builtin_list: Option<&Path>) -> Result<Self, KernelError> {
        let builtin = match builtin_list {
            Some(p) if p.is_file() => read_builtin(p)?,
            _ => BTreeSet::new(),
        };
        let mut index = BTreeMap::new();
        if let Some(root) = root {
            index_dir(root, &mut index)?;
        }
        Ok(ModuleTree {
            root: root.map(Path::to_path_buf),
            builtin,
            index,
        })
    }

    pub fn is_builtin(&self, name: &str) -> bool {
        self.builtin.contains(&normalise_name(name))
    }

    fn lookup(&self, name: &str) -> Result<Option<Lookup>, KernelError> {
        if self.builtin.contains(name) {
            return Ok(Some(Lookup::Builtin));
        }
        match self.index.get(name) {
            None => Ok(None),
            Some(path) => {
                let mut deps = modinfo::read(path)?.depends;
                // Sorted so the order never depends on how a build listed them.
                deps.sort();
                deps.dedup();
                Ok(Some(Lookup::Module {
                    path: path.clone(),
                    deps,
                }))
            }
        }
    }

    /// Load order of `wanted` and their dependencies (dependencies first).
    pub fn load_order(&self, wanted: &[String]) -> Result<Vec<ModuleFile>, KernelError> {
        let dir = self.root.clone().unwrap_or_default();
        order(wanted, &dir, &mut |n| self.lookup(n))
    }
}

/// Depth-first post-order over `wanted` in the given order; built-ins are skipped.
pub fn order(
    wanted: &[String],
    dir: &Path,
    lookup: &mut dyn FnMut(&str) -> Result<Option<Lookup>, KernelError>,
) -> Result<Vec<ModuleFile>, KernelError> {
    let mut walk = Walk {
        dir,
        lookup,
        done: BTreeSet::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for name in wanted {
        walk.visit(&normalise_name(name), None)?;
    }
    Ok(walk.out)
}

struct Walk<'a> {
    dir: &'a Path,
    lookup: &'a mut dyn FnMut(&str) -> Result<Option<Lookup>, KernelError>,
    done: BTreeSet<String>,
    stack: Vec<String>,
    out: Vec<ModuleFile>,
}

impl Walk<'_> {
    fn visit(&mut self, name: &str, needed_by: Option<&str>) -> Result<(), KernelError> {
        if self.done.contains(name) {
            return Ok(());
        }
        if let Some(pos) = self.stack.iter().position(|n| n == name) {
            let mut cycle = self.stack[pos..].to_vec();
            cycle.push(name.to_string());
            return Err(KernelError::ModuleCycle {
                cycle: cycle.join(" -> "),
            });
        }
        match (self.lookup)(name)? {
            None => Err(KernelError::ModuleNotFound {
                name: name.to_string(),
                dir: self.dir.to_path_buf(),
                needed_by: needed_by.map_or(String::new(), |m| format!(" (needed by {m})")),
            }),
            Some(Lookup::Builtin) => {
                self.done.insert(name.to_string());
                Ok(())
            }
            Some(Lookup::Module { path, deps }) => {
                self.stack.push(name.to_string());
                for dep in &deps {
                    self.visit(dep, Some(name))?;
                }
                self.stack.pop();
                self.done.insert(name.to_string());
                self.out.push(ModuleFile {
                    name: name.to_string(),
                    path,
                });
                Ok(())
            }
        }
    }
}

/// Names in a `modules.builtin` file (one `kernel/.../name.ko` per line).
fn read_builtin(path: &Path) -> Result<BTreeSet<String>, KernelError> {
    let text = std::fs::read_to_string(path).map_err(|e| KernelError::io(path, e))?;
    Ok(text
        .lines()
        .filter_map(|l| module_name(Path::new(l.trim())))
        .collect())
}

/// `.../virtio-rng.ko` -> `virtio_rng`; None for other files.
fn module_name(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    file.strip_suffix(".ko").map(normalise_name)
}

fn index_dir(dir: &Path, index: &mut BTreeMap<String, PathBuf>) -> Result<(), KernelError> {
    let entries = std::fs::read_dir(dir).map_err(|e| KernelError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| KernelError::io(dir, e))?;
        let path = entry.path();
        let ft = entry.file_type().map_err(|e| KernelError::io(&path, e))?;
        if ft.is_dir() {
            index_dir(&path, index)?;
        } else if let Some(name) = module_name(&path) {
            index.insert(name, path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(
        edges: &[(&str, &[&str])],
        builtin: &[&str],
    ) -> impl FnMut(&str) -> Result<Option<Lookup>, KernelError> {
        let edges: BTreeMap<String, Vec<String>> = edges
            .iter()
            .map(|(n, d)| (n.to_string(), d.iter().map(|s| s.to_string()).collect()))
            .collect();
        let builtin: BTreeSet<String> = builtin.iter().map(|s| s.to_string()).collect();
        move |n: &str| {
            Ok(if builtin.contains(n) {
                Some(Lookup::Builtin)
            } else {
                edges.get(n).map(|d| Lookup::Module {
                    path: PathBuf::from(format!("{n}.ko")),
                    deps: d.clone(),
                })
            })
        }
    }

    fn names(v: &[ModuleFile]) -> Vec<&str> {
        v.iter().map(|m| m.name.as_str()).collect()
    }

    #[test]
    fn deps_first_builtins_skipped_no_duplicates() {
        let mut g = graph(
            &[
                ("a", &["b", "core"]),
                ("b", &["c"]),
                ("c", &[]),
                ("d", &["c"]),
            ],
            &["core"],
        );
        let want = ["a".to_string(), "d".to_string(), "core".to_string()];
        let got = order(&want, Path::new("/m"), &mut g).unwrap();
        assert_eq!(names(&got), vec!["c", "b", "a", "d"]);
    }

    #[test]
    fn missing_dependency_names_requirer() {
        let mut g = graph(&[("a", &["gone"])], &[]);
        let err = order(&["a".to_string()], Path::new("/m"), &mut g)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`gone`") && err.contains("needed by a") && err.contains("/m"),
            "{err}"
        );
    }

    #[test]
    fn cycle_is_reported() {
        let mut g = graph(&[("a", &["b"]), ("b", &["a"])], &[]);
        let err = order(&["a".to_string()], Path::new("/m"), &mut g)
            .unwrap_err()
            .to_string();
        assert!(err.contains("a -> b -> a"), "{err}");
    }

    #[test]
    fn dash_and_underscore_are_the_same_module() {
        let mut g = graph(&[("virtio_rng", &[])], &[]);
        let got = order(&["virtio-rng".to_string()], Path::new("/m"), &mut g).unwrap();
        assert_eq!(names(&got), vec!["virtio_rng"]);
    }
}
