//! A tiny flag parser: `--name value` and `--name=value`, with an error for anything
//! left over, so xtask needs no argument-parsing dependency.

use anyhow::{bail, Context, Result};
use std::str::FromStr;

/// The flags of one command, consumed one by one; [`Flags::finish`] rejects leftovers.
pub(crate) struct Flags {
    args: Vec<String>,
}

impl Flags {
    pub(crate) fn new(args: &[String]) -> Self {
        Flags {
            args: args.to_vec(),
        }
    }

    /// Removes `--name VALUE` or `--name=VALUE` and returns VALUE (the last one if repeated).
    pub(crate) fn value(&mut self, name: &str) -> Result<Option<String>> {
        let prefix = format!("{name}=");
        let mut found = None;
        let mut i = 0;
        while i < self.args.len() {
            if self.args[i] == name {
                if i + 1 >= self.args.len() {
                    bail!("flag {name} needs a value");
                }
                found = Some(self.args.remove(i + 1));
                self.args.remove(i);
            } else if let Some(v) = self.args[i].strip_prefix(&prefix) {
                found = Some(v.to_string());
                self.args.remove(i);
            } else {
                i += 1;
            }
        }
        Ok(found)
    }

    /// Removes every bare `--name` (a switch without a value) and returns whether there was one.
    pub(crate) fn switch(&mut self, name: &str) -> bool {
        let before = self.args.len();
        self.args.retain(|a| a != name);
        self.args.len() != before
    }

    /// Removes `--name N` and returns N, a positive integer (`default` when absent).
    pub(crate) fn positive(&mut self, name: &str, default: usize) -> Result<usize> {
        match self.value(name)? {
            None => Ok(default),
            Some(s) => s
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .with_context(|| format!("{name}: expected a positive integer, got `{s}`")),
        }
    }

    /// Fails on any argument no `value`/`switch` call consumed.
    pub(crate) fn finish(self) -> Result<()> {
        match self.args.first() {
            None => Ok(()),
            Some(a) if a.starts_with('-') => bail!("unknown flag `{a}` (see --help)"),
            Some(a) => bail!("unexpected argument `{a}` (see --help)"),
        }
    }
}

/// Parses a comma-separated list such as `1,2,3,4,7`; empty items and empty lists are errors.
pub(crate) fn parse_list<T>(flag: &str, text: &str) -> Result<Vec<T>>
where
    T: FromStr,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    let items: Vec<&str> = text.split(',').map(str::trim).collect();
    if items.iter().any(|s| s.is_empty()) {
        bail!("{flag}: empty item in list `{text}`");
    }
    items
        .into_iter()
        .map(|s| {
            s.parse::<T>()
                .with_context(|| format!("{flag}: invalid item `{s}`"))
        })
        .collect()
}

/// Parses a list of positive integers (rank counts).
pub(crate) fn parse_positive_list(flag: &str, text: &str) -> Result<Vec<usize>> {
    let list: Vec<usize> = parse_list(flag, text)?;
    if list.contains(&0) {
        bail!("{flag}: values must be at least 1, got `{text}`");
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn switches_are_consumed() {
        let mut f = Flags::new(&strings(&["--quiet", "--a", "1", "--quiet"]));
        assert!(f.switch("--quiet"));
        assert!(!f.switch("--loud"));
        assert_eq!(f.value("--a").unwrap().as_deref(), Some("1"));
        assert!(f.finish().is_ok());
    }

    #[test]
    fn values_and_leftovers() {
        let mut f = Flags::new(&strings(&["--a", "1", "--b=2", "--quiet", "--a", "3"]));
        assert_eq!(f.value("--a").unwrap().as_deref(), Some("3"));
        assert_eq!(f.value("--b").unwrap().as_deref(), Some("2"));
        assert_eq!(f.value("--c").unwrap(), None);
        assert!(f.finish().unwrap_err().to_string().contains("--quiet"));

        let mut f = Flags::new(&strings(&["--a"]));
        assert!(f.value("--a").is_err());

        let f = Flags::new(&strings(&["--nope"]));
        assert!(f.finish().unwrap_err().to_string().contains("--nope"));
        let f = Flags::new(&strings(&["stray"]));
        assert!(f.finish().unwrap_err().to_string().contains("stray"));
    }

    #[test]
    fn lists() {
        assert_eq!(parse_positive_list("--ranks", "1,2, 3").unwrap(), [1, 2, 3]);
        assert!(parse_positive_list("--ranks", "1,0").is_err());
        assert!(parse_positive_list("--ranks", "1,,2").is_err());
        assert!(parse_positive_list("--ranks", "").is_err());
        assert!(parse_positive_list("--ranks", "x").is_err());
        assert_eq!(
            parse_list::<String>("--methods", "cg,cacg").unwrap(),
            ["cg", "cacg"]
        );
    }
}
