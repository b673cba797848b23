//! The kernel entries of a PTX image and their parameter sizes (PTX ISA 9.0, "Kernel
//! Function Parameters": `.param .TYPE name` or `.param .align A .b8 name[N]`).

/// One `.entry` of a PTX image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The entry's name (the kernel's `extern "C"` name).
    pub(crate) name: String,
    /// The size in bytes of each parameter, in order.
    pub(crate) params: Vec<usize>,
}

/// The bytes of a PTX fundamental type (`.u64`, `.f32`, `.b8`, `.pred`, ...).
fn type_size(t: &str) -> Option<usize> {
    let bits = t.strip_prefix('.')?;
    if bits == "pred" {
        return Some(1);
    }
    let n: usize = bits.strip_prefix(['u', 's', 'b', 'f'])?.parse().ok()?;
    matches!(n, 8 | 16 | 32 | 64 | 128).then_some(n / 8)
}

/// The size of one parameter declaration (`.param .u64 .ptr .global .align 8 x`,
/// `.param .align 8 .b8 s[24]`), or why it cannot be read.
fn param_size(decl: &str) -> Result<usize, String> {
    let mut size = None;
    let mut name = "";
    for tok in decl.split_whitespace() {
        if let Some(s) = type_size(tok) {
            size = Some(s);
        } else if !tok.starts_with('.') && tok.parse::<usize>().is_err() {
            name = tok;
        }
    }
    let size = size.ok_or_else(|| format!("parameter `{decl}`: no type"))?;
    match name.split_once('[') {
        Some((_, n)) => n
            .trim_end_matches(']')
            .parse::<usize>()
            .map(|count| count * size)
            .map_err(|_| format!("parameter `{decl}`: bad array length")),
        None => Ok(size),
    }
}

/// Every `.entry` of `ptx` with its parameter sizes.
pub(crate) fn entries(ptx: &str) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry") {
        rest = &rest[at + ".entry".len()..];
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
            .collect();
        if name.is_empty() {
            return Err("an .entry without a name".into());
        }
        let open = rest
            .find('(')
            .ok_or_else(|| format!("entry `{name}`: no parameter list"))?;
        let close = rest[open..]
            .find(')')
            .ok_or_else(|| format!("entry `{name}`: unterminated parameter list"))?;
        let list = &rest[open + 1..open + close];
        let params = list
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(|d| {
                d.strip_prefix(".param")
                    .ok_or_else(|| format!("entry `{name}`: `{d}` is not a .param"))
                    .and_then(param_size)
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.push(Entry { name, params });
        rest = &rest[open + close..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_entries_and_parameter_sizes() {
        let ptx = "\
.version 9.0
.target sm_90
// .globl axpy
.visible .entry axpy(
\t.param .u64 axpy_param_0,
\t.param .f64 axpy_param_1,
\t.param .u64 .ptr .global .align 8 axpy_param_2,
\t.param .u32 axpy_param_3
)
{
\tret;
}
.visible .entry s(
\t.param .align 8 .b8 s_param_0[24]
)
{ ret; }
.visible .entry none()
{ ret; }
";
        let e = entries(ptx).expect("parse");
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].name, "axpy");
        assert_eq!(e[0].params, vec![8, 8, 8, 4]);
        assert_eq!(e[1].params, vec![24]);
        assert!(e[2].params.is_empty());
        assert!(entries(".entry x(.param y)").is_err());
    }

    #[test]
    fn the_embedded_ptx_has_every_kernel() {
        let ptx = include_str!("../../linalg/src/device/kernels.ptx");
        let e = entries(ptx).expect("parse");
        assert!(e.len() >= 30);
        let axpy = e.iter().find(|e| e.name == "axpy").expect("axpy");
        assert_eq!(axpy.params, vec![8, 8, 8, 8]);
        let finish = e
            .iter()
            .find(|e| e.name == "finish_sums")
            .expect("finish_sums");
        assert_eq!(finish.params, vec![4, 8, 8]);
    }
}
