//! The tables the `bench` subcommands print: the row shared by `bench collectives` and
//! `bench pingpong`, its JSON and CSV lines, and the `--sizes` parser.

use serde::Serialize;

use crate::output::out;

/// One row of the table (the CLI contract's columns), shared by `bench collectives` and
/// `bench pingpong`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub(crate) schema_version: u32,
    pub(crate) op: &'static str,
    pub(crate) algo: &'static str,
    pub(crate) backend: &'static str,
    pub(crate) fabric: Option<String>,
    pub(crate) memory: &'static str,
    pub(crate) ranks: usize,
    pub(crate) bytes: usize,
    pub(crate) avg_us: f64,
    pub(crate) min_us: f64,
    pub(crate) max_us: f64,
    pub(crate) bandwidth_gbs: f64,
    pub(crate) busbw_gbs: f64,
    pub(crate) modeled: bool,
    pub(crate) verified: Option<bool>,
}

/// Sizes `LIST` (`8,64,1K`) or `MIN..MAX` (powers of two), bytes with K/M/G suffixes.
pub(crate) fn parse_sizes(text: &str) -> Result<Vec<usize>, String> {
    if let Some((lo, hi)) = text.split_once("..") {
        let (lo, hi) = (parse_size(lo)?, parse_size(hi)?);
        if lo > hi {
            return Err(format!("empty range {text}"));
        }
        let mut s = if lo == 0 { vec![0] } else { Vec::new() };
        let mut v = lo.max(1).next_power_of_two();
        while v <= hi {
            s.push(v);
            v = v
                .checked_mul(2)
                .ok_or_else(|| format!("range {text} is too large"))?;
        }
        Ok(s)
    } else {
        text.split(',').map(parse_size).collect()
    }
}

/// One size in bytes with an optional K/M/G suffix (1K = 1024).
pub(crate) fn parse_size(t: &str) -> Result<usize, String> {
    let t = t.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1usize << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("'{t}' is not a size in bytes (e.g. 8, 64K, 4M)"))
}

/// The CSV header of [`Row`] (`--csv`).
pub(crate) const CSV_HEADER: &str = "schema_version,op,algo,backend,fabric,memory,ranks,bytes,avg_us,min_us,max_us,bandwidth_gbs,busbw_gbs,modeled,verified";

/// Print `r` as one JSON line (`json`) or one CSV line (`csv`); false when neither was
/// asked for (the caller prints its own human-readable line).
pub(crate) fn print_machine_row(r: &Row, json: bool, csv: bool) -> bool {
    if json {
        if let Ok(line) = serde_json::to_string(r) {
            out!("{line}");
        }
    } else if csv {
        out!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.schema_version,
            r.op,
            r.algo,
            r.backend,
            r.fabric.as_deref().unwrap_or(""),
            r.memory,
            r.ranks,
            r.bytes,
            r.avg_us,
            r.min_us,
            r.max_us,
            r.bandwidth_gbs,
            r.busbw_gbs,
            r.modeled,
            r.verified.map_or(String::new(), |v| v.to_string())
        );
    } else {
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_lists_ranges_and_suffixes() {
        assert_eq!(parse_sizes("8,64,1K").unwrap(), vec![8, 64, 1024]);
        assert_eq!(parse_sizes("8..64").unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(parse_sizes("0..4").unwrap(), vec![0, 1, 2, 4]);
        assert_eq!(parse_sizes("1M").unwrap(), vec![1 << 20]);
        assert!(parse_sizes("8,x").is_err());
        assert!(parse_sizes("64..8").is_err());
    }
}
