//! Case generation: from the corpus (seed matrices, fabric and solve TOML files, the flag
//! values the binary's `-h` lists) and a case's own random stream, one `krylov` command line
//! with its input files. Flags are mostly valid, with extreme values, unknown names and
//! special paths (a FIFO, a directory, the case's own null and full devices, a missing file) mixed in,
//! so most cases reach the solvers and some probe the edges of the input checks.

use super::mutate::{mutate, EXTREMES};
use super::residual::Rhs;
use super::rng::Rng;
use std::collections::BTreeMap;

/// A seed input file.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    /// Where it came from, for notes.
    pub(crate) name: String,
    pub(crate) bytes: Vec<u8>,
    /// Rows of a matrix seed (right-hand sides are sized from it); 0 for TOML files.
    pub(crate) rows: usize,
}

/// Possible values of each flag, keyed `"<subcommand> --flag"`, read from the binary's `-h`.
#[derive(Debug, Default)]
pub(crate) struct Values(pub(crate) BTreeMap<String, Vec<String>>);

/// The flags whose possible values the generator draws from (checked present at start).
pub(crate) const NEEDED: &[(&str, &str)] = &[
    ("solve", "--method"),
    ("solve", "--basis"),
    ("solve", "--precond"),
    ("solve", "--reorder"),
    ("solve", "--partition"),
    ("solve", "--backend"),
    ("solve", "--device"),
    ("solve", "--spmv"),
    ("solve", "--allreduce"),
    ("solve", "--exchange"),
    ("bench collectives", "--op"),
    ("bench collectives", "--memory"),
    ("bench pingpong", "--mechanism"),
    ("bench pingpong", "--mode"),
    ("bench neighbor", "--strategy"),
    ("bench neighbor", "--mode"),
];

impl Values {
    /// Adds the `[possible values: a, b]` lists of one subcommand's `-h` text.
    pub(crate) fn add_help(&mut self, command: &str, help: &str) {
        let mut blocks: Vec<String> = Vec::new();
        for line in help.lines() {
            let t = line.trim();
            if t.starts_with('-') {
                blocks.push(t.to_string());
            } else if let Some(last) = blocks.last_mut() {
                last.push(' ');
                last.push_str(t);
            }
        }
        for block in blocks {
            let Some(flag) = block
                .split([' ', ','])
                .find(|t| t.starts_with("--"))
                .map(|t| t.split(['=', '[']).next().unwrap_or(t).to_string())
            else {
                continue;
            };
            let Some(start) = block.find("[possible values: ") else {
                continue;
            };
            let rest = &block[start + "[possible values: ".len()..];
            let Some(end) = rest.find(']') else {
                continue;
            };
            let list = rest[..end].split(", ").map(str::to_string).collect();
            self.0.insert(format!("{command} {flag}"), list);
        }
    }

    fn get(&self, command: &str, flag: &str) -> &[String] {
        self.0
            .get(&format!("{command} {flag}"))
            .map_or(&[], Vec::as_slice)
    }
}

/// Everything cases are made from.
#[derive(Debug, Default)]
pub(crate) struct Corpus {
    pub(crate) matrices: Vec<Input>,
    /// Fabric TOML files (`configs/fabrics/*.toml`).
    pub(crate) fabrics: Vec<Input>,
    /// Fabric preset names (the stems of those files).
    pub(crate) presets: Vec<String>,
    /// Solve TOML configs.
    pub(crate) configs: Vec<Input>,
    pub(crate) values: Values,
}

/// What the verdict checks beyond the exit status.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Check {
    /// Only the exit status and the error line.
    Exit,
    /// `krylov solve --json`: one JSON object; a convergence claim checked against the report
    /// and, where `output` names the solution file and `rhs` is known, recomputed.
    Solve {
        matrix: String,
        rhs: Option<Rhs>,
        output: Option<String>,
    },
    /// `krylov compare --json`: one JSON object per line, every convergence claim checked
    /// against its row.
    Rows,
    /// `krylov gen`: the matrix written to `output` (stdout when `None`) is readable with
    /// `rows` rows.
    Gen { output: Option<String>, rows: u128 },
    /// A run with `--plot` and a closed stdout: an exit 0 must have written the plot.
    Plot { path: String },
}

/// One generated case.
#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) index: u64,
    /// The subcommand (`solve`, `bench collectives`, ...).
    pub(crate) command: String,
    /// The arguments after the binary; paths are relative to the case folder.
    pub(crate) args: Vec<String>,
    /// Files written into the case folder before it runs.
    pub(crate) files: Vec<(String, Vec<u8>)>,
    /// FIFOs made in the case folder, with the bytes fed into each.
    pub(crate) fifos: Vec<(String, Vec<u8>)>,
    /// Run with stdout a pipe whose reader is closed at once (`krylov ... | head -0`).
    pub(crate) stdout_closed: bool,
    /// What was mutated, for the reproducer.
    pub(crate) notes: Vec<String>,
    pub(crate) check: Check,
}

impl Case {
    /// The bytes of a case file (written or fed through a FIFO).
    pub(crate) fn file(&self, name: &str) -> Option<&[u8]> {
        self.files
            .iter()
            .chain(&self.fifos)
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_slice())
    }
}

const INT_EXTREMES: &[&str] = &[
    "0",
    "-1",
    "65536",
    "1000000",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
];

/// Extreme iteration counts: invalid ones only. A huge valid cap is a legitimately long run
/// on a matrix that does not converge, not a defect, and would only show up as a hang.
const ITER_EXTREMES: &[&str] = &["0", "-1", "18446744073709551616", "1e3", ""];

/// A builder of one case.
struct Gen<'c> {
    corpus: &'c Corpus,
    rng: Rng,
    case: Case,
}

impl Gen<'_> {
    fn arg(&mut self, flag: &str, value: impl Into<String>) {
        self.case.args.push(flag.to_string());
        self.case.args.push(value.into());
    }

    fn switch(&mut self, flag: &str) {
        self.case.args.push(flag.to_string());
    }

    /// A registry value of `command --flag`, now and then a name no registry has.
    fn registry(&mut self, command: &str, flag: &str) -> String {
        let values = self.corpus.values.get(command, flag);
        if values.is_empty() || self.rng.one_in(40) {
            return "nope".into();
        }
        self.rng.pick(values).clone()
    }

    /// One of `normal`, or one time in `odds` an extreme integer.
    fn int(&mut self, normal: &[&str], odds: usize) -> String {
        if self.rng.one_in(odds) {
            (*self.rng.pick(INT_EXTREMES)).to_string()
        } else {
            (*self.rng.pick(normal)).to_string()
        }
    }

    /// One of `normal`, or one time in `odds` an invalid iteration count.
    fn iterations(&mut self, normal: &[&str], odds: usize) -> String {
        if self.rng.one_in(odds) {
            (*self.rng.pick(ITER_EXTREMES)).to_string()
        } else {
            (*self.rng.pick(normal)).to_string()
        }
    }

    /// One of `normal`, or one time in `odds` an extreme number.
    fn real(&mut self, normal: &[&str], odds: usize) -> String {
        if self.rng.one_in(odds) {
            (*self.rng.pick(EXTREMES)).to_string()
        } else {
            (*self.rng.pick(normal)).to_string()
        }
    }

    /// A seed, mutated one time in `odds` (1 to 3 mutations); returns its bytes and rows.
    fn seed_bytes(&mut self, pool: &[Input], odds: usize, what: &str) -> (Vec<u8>, usize) {
        let seed = self.rng.pick(pool).clone();
        self.case.notes.push(format!("{what}: seed {}", seed.name));
        if self.rng.one_in(odds) {
            let count = 1 + self.rng.below(3);
            let (bytes, notes) = mutate(&mut self.rng, &seed.bytes, count);
            self.case
                .notes
                .extend(notes.into_iter().map(|n| format!("{what}: {n}")));
            (bytes, seed.rows)
        } else {
            (seed.bytes, seed.rows)
        }
    }

    /// The matrix argument: usually `m.mtx` (a seed, mutated half the time), sometimes the
    /// same bytes through a FIFO, sometimes a path that is no matrix file. Returns the
    /// argument, the file's name in the case when it has bytes, and the seed's rows.
    fn matrix(&mut self) -> (String, Option<String>, usize) {
        let (bytes, rows) = self.seed_bytes(&self.corpus.matrices.clone(), 2, "matrix");
        match self.rng.below(40) {
            0 => {
                self.case.notes.push("matrix: through a FIFO".into());
                self.case.fifos.push(("m.mtx".into(), bytes));
                ("m.mtx".into(), Some("m.mtx".into()), rows)
            }
            1 => {
                let path =
                    *self
                        .rng
                        .pick(&["/dev/null", "missing.mtx", ".", "empty.mtx", "m.mtx.gz"]);
                if path == "empty.mtx" {
                    self.case.files.push((path.into(), Vec::new()));
                }
                if path == "m.mtx.gz" {
                    // Not gzip data behind a .gz name.
                    self.case.files.push((path.into(), bytes));
                }
                (path.into(), None, rows)
            }
            _ => {
                self.case.files.push(("m.mtx".into(), bytes));
                ("m.mtx".into(), Some("m.mtx".into()), rows)
            }
        }
    }

    /// A Matrix Market vector file of about `rows` entries, scaled by a huge or tiny factor
    /// now and then, its length off now and then, mutated now and then.
    fn vector(&mut self, name: &str, rows: usize) -> String {
        let len = match self.rng.below(12) {
            0 => rows + 1,
            1 => 0,
            _ => rows,
        };
        let scale = *self
            .rng
            .pick(&[1.0, 1.0, 1.0, 1e300, 1e-300, 1e154, 1e-154, 1e-320, 1e200]);
        let random = self.rng.one_in(2);
        let mut text = format!("%%MatrixMarket matrix array real general\n{len} 1\n");
        for _ in 0..len {
            let v = if random {
                2.0 * self.rng.next_f64() - 1.0
            } else {
                1.0
            };
            text.push_str(&format!("{:.17e}\n", v * scale));
        }
        let mut bytes = text.into_bytes();
        self.case.notes.push(format!(
            "{name}: {len} entries, {} x {scale:e}",
            if random { "uniform(-1,1)" } else { "ones" }
        ));
        if self.rng.one_in(5) {
            let (b, notes) = mutate(&mut self.rng, &bytes, 1);
            bytes = b;
            self.case
                .notes
                .extend(notes.into_iter().map(|n| format!("{name}: {n}")));
        }
        self.case.files.push((name.to_string(), bytes));
        name.to_string()
    }

    /// `--fabric`: a preset name, or a (mutated) fabric file.
    fn fabric(&mut self) {
        if self.rng.one_in(2) || self.corpus.fabrics.is_empty() {
            let name = self.rng.pick(&self.corpus.presets).clone();
            self.arg("--fabric", name);
        } else {
            let (bytes, _) = self.seed_bytes(&self.corpus.fabrics.clone(), 2, "fabric");
            self.case.files.push(("fabric.toml".into(), bytes));
            self.arg("--fabric", "fabric.toml");
        }
    }

    /// The settings `solve` and `compare` share; returns the right-hand side when known
    /// (flag, or the default with no config that could name another).
    fn solve_settings(&mut self, rows: usize, command: &str) -> Option<Rhs> {
        let method_flag = command == "solve";
        if method_flag && !self.rng.one_in(10) {
            let m = self.registry("solve", "--method");
            self.arg("--method", m);
        }
        if self.rng.one_in(2) {
            let k = self.int(&["1", "2", "3", "4", "6", "8", "12"], 12);
            self.arg("--k", k);
        }
        if self.rng.one_in(3) {
            let b = self.registry("solve", "--basis");
            self.arg("--basis", b);
        }
        if self.rng.one_in(5) {
            self.switch("--mpk");
        }
        for (flag, odds) in [
            ("--precond", 3),
            ("--reorder", 4),
            ("--partition", 4),
            ("--spmv", 4),
            ("--allreduce", 4),
            ("--exchange", 6),
        ] {
            if self.rng.one_in(odds) {
                let v = self.registry("solve", flag);
                self.arg(flag, v);
            }
        }
        if !self.rng.one_in(5) {
            let r = self.int(&["1", "2", "3", "4", "5"], 14);
            self.arg("--ranks", r);
        }
        if self.rng.one_in(6) {
            let t = self.int(&["1", "2"], 6);
            self.arg("--threads", t);
        }
        let sim = self.rng.one_in(3);
        if sim {
            self.arg("--backend", "sim");
            if self.rng.one_in(2) {
                self.fabric();
            }
        } else if self.rng.one_in(30) {
            let b = self.registry("solve", "--backend");
            self.arg("--backend", b);
        } else if self.rng.one_in(40) {
            self.fabric();
        }
        if self.rng.one_in(10) {
            let d = self.registry("solve", "--device");
            self.arg("--device", d);
        }
        if self.rng.one_in(2) {
            let tol = self.real(&["1e-6", "1e-8", "1e-10", "1e-12", "1e-14"], 8);
            self.arg("--tol", tol);
        }
        if self.rng.one_in(10) {
            let atol = self.real(&["0", "1e-10", "1e-3"], 4);
            self.arg("--atol", atol);
        }
        if !self.rng.one_in(5) {
            let m = self.iterations(&["1", "10", "100", "1000", "5000"], 14);
            self.arg("--max-iter", m);
        }
        if self.rng.one_in(10) {
            let r = self.int(&["1", "10", "50"], 5);
            self.arg("--replace-every", r);
        }
        let mut rhs = None;
        if !self.rng.one_in(6) {
            let (text, known) = match self.rng.below(12) {
                0..=2 => ("unit_solution".to_string(), Some(Rhs::UnitSolution)),
                3 => ("ones".into(), Some(Rhs::Ones)),
                4 => ("random".into(), Some(Rhs::Random(1))),
                5 => {
                    let seed = *self.rng.pick(&[0u64, 7, 42, u64::MAX]);
                    (format!("random:{seed}"), Some(Rhs::Random(seed)))
                }
                6 => (
                    (*self.rng.pick(&["random:-1", "random:x", "random:"])).into(),
                    None,
                ),
                _ => {
                    let name = self.vector("b.mtx", rows);
                    (name.clone(), Some(Rhs::File(name)))
                }
            };
            self.arg("--rhs", text);
            rhs = Some(known);
        }
        if self.rng.one_in(6) {
            if self.rng.one_in(3) {
                self.arg("--x0", "zero");
            } else {
                let name = self.vector("x0.mtx", rows);
                self.arg("--x0", name);
            }
        }
        if self.rng.one_in(6) {
            self.switch("--history");
        }
        if self.rng.one_in(4) {
            self.switch("--strict");
        }
        let mut config_names_rhs = false;
        if self.rng.one_in(5) {
            let (bytes, _) = self.seed_bytes(&self.corpus.configs.clone(), 2, "config");
            config_names_rhs = bytes.windows(3).any(|w| w == b"rhs");
            self.case.files.push(("solve.toml".into(), bytes));
            self.arg("--config", "solve.toml");
        }
        match rhs {
            Some(known) => known,
            None if config_names_rhs => None,
            None => Some(Rhs::UnitSolution),
        }
    }

    fn solve(&mut self) {
        let (path, matrix, rows) = self.matrix();
        self.case.args = vec!["solve".into(), path];
        let rhs = self.solve_settings(rows, "solve");
        let output = if self.rng.one_in(12) {
            let special = *self
                .rng
                .pick(&["dev-null", "dev-full", "no/such/dir/x.mtx", "."]);
            self.arg("--output", special);
            None
        } else if !self.rng.one_in(10) {
            self.arg("--output", "x.mtx");
            Some("x.mtx".to_string())
        } else {
            None
        };
        if self.rng.one_in(10) {
            let r = *self.rng.pick(&["report.json", "dev-full", "."]);
            self.arg("--report", r);
        }
        if !self.rng.one_in(10) {
            self.switch("--json");
            self.case.check = Check::Solve {
                matrix: matrix.unwrap_or_default(),
                rhs,
                output,
            };
        }
    }

    fn compare(&mut self) {
        let (path, _, rows) = self.matrix();
        self.case.args = vec!["compare".into(), path];
        let count = 1 + self.rng.below(4);
        let mut items = Vec::new();
        for _ in 0..count {
            if self.rng.one_in(15) {
                let bad = *self.rng.pick(&[
                    "cacg:0",
                    "cbcg:4294967296",
                    "cg:4:nope",
                    "",
                    "cg::",
                    "cbcgr:8:monomial:mpk:x",
                ]);
                items.push(bad.to_string());
                continue;
            }
            let mut item = self.registry("solve", "--method");
            if self.rng.one_in(2) {
                let k = self.int(&["1", "2", "4", "8"], 12);
                item.push(':');
                item.push_str(&k);
                if self.rng.one_in(2) {
                    item.push(':');
                    item.push_str(&self.registry("solve", "--basis"));
                    if self.rng.one_in(3) {
                        item.push_str(":mpk");
                    }
                }
            }
            items.push(item);
        }
        self.arg("--methods", items.join(","));
        self.solve_settings(rows, "compare");
        if self.rng.one_in(8) {
            let plot = *self.rng.pick(&["plot.svg", "dev-full"]);
            self.arg("--plot", plot);
        }
        if !self.rng.one_in(8) {
            self.switch("--json");
            self.case.check = Check::Rows;
        }
    }

    fn plan(&mut self) {
        let (path, _, _) = self.matrix();
        self.case.args = vec!["plan".into(), path];
        let count = 1 + self.rng.below(3);
        let ranks: Vec<String> = (0..count)
            .map(|_| self.int(&["1", "2", "4", "16", "64", "256", "4096"], 10))
            .collect();
        self.arg("--ranks", ranks.join(","));
        let fabric = self.rng.pick(&self.corpus.presets).clone();
        if self.rng.one_in(5) {
            self.fabric();
        } else {
            self.arg("--fabric", fabric);
        }
        if self.rng.one_in(2) {
            let k = if self.rng.one_in(8) {
                *self
                    .rng
                    .pick(&["0..4", "3..2", "1..4294967296", "21", "x", "1..20"])
            } else {
                *self.rng.pick(&["2..4", "1", "8", "2..8", "1..3"])
            };
            self.arg("--k", k);
        }
        if self.rng.one_in(3) {
            let count = 1 + self.rng.below(3);
            let items: Vec<String> = (0..count)
                .map(|_| {
                    let m = self.registry("solve", "--method");
                    if self.rng.one_in(2) {
                        format!("{m}:{}", self.registry("solve", "--basis"))
                    } else {
                        m
                    }
                })
                .collect();
            self.arg("--methods", items.join(","));
        }
        if self.rng.one_in(3) {
            let tol = self.real(&["1e-6", "1e-8", "1e-12"], 6);
            self.arg("--tol", tol);
        }
        if self.rng.one_in(3) {
            let p = self.int(&["1", "2", "3"], 6);
            self.arg("--probe-ranks", p);
        }
        let cap = self.iterations(&["20", "100", "300"], 10);
        self.arg("--probe-max-iter", cap);
        if self.rng.one_in(4) {
            let s = *self.rng.pick(&["full", "tracked", "fast"]);
            self.arg("--probe", s);
        }
        if self.rng.one_in(4) {
            self.switch("--no-probe-cache");
        }
        if self.rng.one_in(4) {
            self.switch("--no-mpk");
        }
        if self.rng.one_in(6) {
            let d = self.rng.pick(&self.corpus.presets).clone();
            self.arg("--device-model", d);
        }
        if self.rng.one_in(2) {
            self.switch("--json");
        }
    }

    fn gen(&mut self) {
        let three = self.rng.one_in(2);
        let kind = if three { "poisson3d" } else { "poisson2d" };
        self.case.args = vec!["gen".into(), kind.into()];
        let n = self.int(&["0", "1", "2", "3", "5", "8"], 6);
        let n = if n == "65536" || n == "1000000" {
            // Legal but gigabytes of output: an overflowing size instead.
            if three { "2097152" } else { "4294967296" }.to_string()
        } else {
            n
        };
        self.arg("--n", n.clone());
        if three && self.rng.one_in(2) {
            self.switch("--heterogeneous");
            if self.rng.one_in(2) {
                let c = self.real(&["1e3", "1", "1e6"], 3);
                self.arg("--contrast", c);
            }
            if self.rng.one_in(3) {
                let s = self.int(&["0", "1", "42"], 4);
                self.arg("--seed", s);
            }
        }
        let output = if self.rng.one_in(2) {
            let o = if self.rng.one_in(10) {
                *self.rng.pick(&["dev-full", ".", "no/such/dir/g.mtx"])
            } else {
                "g.mtx"
            };
            self.arg("-o", o);
            Some(o.to_string())
        } else {
            None
        };
        // Written to a file of the case (or stdout) and of a size that has a row count.
        let readable = matches!(output.as_deref(), None | Some("g.mtx"));
        let rows = n.parse::<u128>().ok().and_then(|n| {
            if three {
                n.checked_pow(3)
            } else {
                n.checked_pow(2)
            }
        });
        if let (true, Some(rows)) = (readable, rows) {
            self.case.check = Check::Gen { output, rows };
        }
    }

    fn bench(&mut self) {
        let sizes_normal = ["8", "8,64", "8..1K", "64,1K", "16"];
        let sizes_odd = [
            "0",
            "7",
            "1G",
            "0..8",
            "8..4294967296",
            "18446744073709551615",
            "-8",
            "1K..8",
        ];
        let sizes = |g: &mut Self| {
            if g.rng.one_in(8) {
                (*g.rng.pick(&sizes_odd)).to_string()
            } else {
                (*g.rng.pick(&sizes_normal)).to_string()
            }
        };
        let sim = self.rng.one_in(2);
        match self.rng.below(3) {
            0 => {
                self.case.command = "bench collectives".into();
                self.case.args = vec!["bench".into(), "collectives".into()];
                let op = self.registry("bench collectives", "--op");
                self.arg("--op", op);
                if self.rng.one_in(20) {
                    self.arg("--algo", "nope");
                }
                let count = 1 + self.rng.below(2);
                let ranks: Vec<String> = (0..count)
                    .map(|_| self.int(&["1", "2", "3", "4", "5"], 12))
                    .collect();
                self.arg("--ranks", ranks.join(","));
                let s = sizes(self);
                self.arg("--sizes", s);
                let iters = self.iterations(&["1", "2", "3"], 12);
                self.arg("--iters", iters);
                let warmup = if self.rng.one_in(2) { "0" } else { "1" };
                self.arg("--warmup", warmup);
                if self.rng.one_in(2) {
                    self.switch("--verify");
                }
                if self.rng.one_in(4) {
                    let root = self.int(&["0", "1", "4"], 4);
                    self.arg("--root", root);
                }
                if self.rng.one_in(6) {
                    let m = self.registry("bench collectives", "--memory");
                    self.arg("--memory", m);
                }
                if self.rng.one_in(6) {
                    let m = *self.rng.pick(&["identity", "bit_reversal", "nope"]);
                    self.arg("--mapping", m);
                }
                if sim && self.rng.one_in(3) {
                    self.switch("--price-only");
                }
            }
            1 => {
                self.case.command = "bench pingpong".into();
                self.case.args = vec!["bench".into(), "pingpong".into()];
                let s = sizes(self);
                self.arg("--sizes", s);
                for flag in ["--mode", "--mechanism"] {
                    if self.rng.one_in(2) {
                        let v = self.registry("bench pingpong", flag);
                        self.arg(flag, v);
                    }
                }
                if self.rng.one_in(3) {
                    let h = self.int(&["1", "2", "3"], 5);
                    self.arg("--hops", h);
                }
            }
            _ => {
                self.case.command = "bench neighbor".into();
                self.case.args = vec!["bench".into(), "neighbor".into()];
                let n = self.int(&["1", "2", "4", "6", "8"], 10);
                self.arg("--neighbors", n);
                let d = self.int(&["1", "2", "3", "4"], 10);
                self.arg("--devices", d);
                for flag in ["--strategy", "--mode"] {
                    if self.rng.one_in(2) {
                        let v = self.registry("bench neighbor", flag);
                        self.arg(flag, v);
                    }
                }
                let s = sizes(self);
                self.arg("--sizes", s);
                let iters = self.iterations(&["1", "2"], 12);
                self.arg("--iters", iters);
            }
        }
        if sim {
            self.arg("--backend", "sim");
            if self.rng.one_in(2) {
                self.fabric();
            }
        }
        match self.rng.below(3) {
            0 => self.switch("--json"),
            1 => self.switch("--csv"),
            _ => {}
        }
    }
}

/// Edge cases of issue 47, each a class of its own (`edge`): pricing a schedule of
/// thousands of ranks under the memory limit, a tolerance below what double precision
/// attains, inputs whose values leave the double range, and a `--plot` with stdout closed.
impl Gen<'_> {
    fn edge(&mut self) {
        match self.rng.below(4) {
            0 => self.edge_pricing(),
            1 => self.edge_tolerance(),
            2 => self.edge_range(),
            _ => self.edge_closed_stdout(),
        }
    }

    /// `bench collectives --price-only` with P^2 transfers at P in the thousands, under the
    /// case's address-space limit (the default budget is half of it) or a small budget.
    fn edge_pricing(&mut self) {
        self.case.command = "bench collectives".into();
        self.case.args = vec!["bench".into(), "collectives".into()];
        let op = *self
            .rng
            .pick(&["alltoall", "allgather", "gather", "allreduce"]);
        self.arg("--op", op);
        let p = *self.rng.pick(&["1024", "1536", "2048", "4096", "256,2048"]);
        self.arg("--ranks", p);
        let v = *self.rng.pick(&["8", "8,64K", "1M"]);
        self.arg("--sizes", v);
        self.arg("--backend", "sim");
        self.switch("--price-only");
        let fabric = self.rng.pick(&self.corpus.presets).clone();
        self.arg("--fabric", fabric);
        if self.rng.one_in(3) {
            let v = *self.rng.pick(&["1K", "64M", "512M"]);
            self.arg("--mem-budget", v);
        }
        self.case
            .notes
            .push("edge: pricing under a memory limit".into());
    }

    /// A solve of an unmutated seed to a tolerance below what double precision attains:
    /// stagnated or converged (the claim checked), never a false success.
    fn edge_tolerance(&mut self) {
        let seed = self.rng.pick(&self.corpus.matrices).clone();
        self.case.notes.push(format!("matrix: seed {}", seed.name));
        self.case.files.push(("m.mtx".into(), seed.bytes));
        self.case.args = vec!["solve".into(), "m.mtx".into()];
        let m = self.registry("solve", "--method");
        self.arg("--method", m);
        let tol = *self
            .rng
            .pick(&["1e-16", "1e-17", "1e-30", "1e-50", "1e-200", "1e-300"]);
        self.arg("--tol", tol);
        let v = *self.rng.pick(&["2000", "20000"]);
        self.arg("--max-iter", v);
        if self.rng.one_in(2) {
            let r = self.int(&["1", "2", "3"], 20);
            self.arg("--ranks", r);
        }
        self.arg("--output", "x.mtx");
        self.switch("--json");
        self.case
            .notes
            .push(format!("edge: tolerance {tol} below attainable accuracy"));
        self.case.check = Check::Solve {
            matrix: "m.mtx".into(),
            rhs: Some(Rhs::UnitSolution),
            output: Some("x.mtx".into()),
        };
    }

    /// Inputs whose values leave the double range: a right-hand side or x0 of huge
    /// entries, a subnormal diagonal entry, duplicates that sum past the largest double.
    fn edge_range(&mut self) {
        let seed = self.rng.pick(&self.corpus.matrices).clone();
        let rows = seed.rows;
        let vector = |v: &str| {
            let mut t = format!("%%MatrixMarket matrix array real general\n{rows} 1\n");
            for _ in 0..rows {
                t.push_str(v);
                t.push('\n');
            }
            t.into_bytes()
        };
        let mut rhs = Some(Rhs::UnitSolution);
        let matrix = match self.rng.below(4) {
            0 => {
                let v = *self.rng.pick(&["5e307", "1e300", "1e-300", "4.9e-324"]);
                self.case.files.push(("b.mtx".into(), vector(v)));
                self.case.args = vec!["solve".into(), "m.mtx".into()];
                self.arg("--rhs", "b.mtx");
                rhs = Some(Rhs::File("b.mtx".into()));
                self.case.notes.push(format!("edge: b of entries {v}"));
                seed.bytes
            }
            1 => {
                let v = *self.rng.pick(&["1e200", "1e308", "-1e300"]);
                self.case.files.push(("x0.mtx".into(), vector(v)));
                self.case.args = vec!["solve".into(), "m.mtx".into()];
                self.arg("--x0", "x0.mtx");
                self.case.notes.push(format!("edge: x0 of entries {v}"));
                seed.bytes
            }
            2 => {
                let d = *self.rng.pick(&["1e-310", "4.9e-324", "1e300"]);
                self.case.args = vec!["solve".into(), "m.mtx".into()];
                self.case.notes.push(format!("edge: diagonal entry {d}"));
                format!(
                    "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 {d}\n2 2 1\n3 3 1\n"
                )
                .into_bytes()
            }
            _ => {
                let v = *self.rng.pick(&["1e308", "-1e308", "9e307"]);
                self.case.args = vec!["solve".into(), "m.mtx".into()];
                self.case.notes.push(format!("edge: duplicates {v} twice"));
                format!(
                    "%%MatrixMarket matrix coordinate real symmetric\n2 2 4\n1 1 4\n2 2 4\n2 1 {v}\n2 1 {v}\n"
                )
                .into_bytes()
            }
        };
        self.case.files.push(("m.mtx".into(), matrix));
        let m = self.registry("solve", "--method");
        self.arg("--method", m);
        if self.rng.one_in(3) {
            let p = self.registry("solve", "--precond");
            self.arg("--precond", p);
        }
        self.arg("--output", "x.mtx");
        self.switch("--json");
        self.case.check = Check::Solve {
            matrix: "m.mtx".into(),
            rhs,
            output: Some("x.mtx".into()),
        };
    }

    /// `compare`, `plan` or `bench collectives` with `--plot` while stdout's reader is gone.
    fn edge_closed_stdout(&mut self) {
        self.case.stdout_closed = true;
        self.case
            .notes
            .push("edge: --plot with stdout closed".into());
        match self.rng.below(3) {
            0 => {
                let (path, _, _) = self.matrix();
                self.case.command = "compare".into();
                self.case.args = vec!["compare".into(), path];
                let v = *self.rng.pick(&["cg,ccg", "cg,pipecg,cacg"]);
                self.arg("--methods", v);
            }
            1 => {
                let (path, _, _) = self.matrix();
                self.case.command = "plan".into();
                self.case.args = vec!["plan".into(), path];
                let v = *self.rng.pick(&["4", "2,16,64"]);
                self.arg("--ranks", v);
                let fabric = self.rng.pick(&self.corpus.presets).clone();
                self.arg("--fabric", fabric);
                self.arg("--methods", "cg,pipecg");
                self.arg("--probe-max-iter", "300");
                self.switch("--no-probe-cache");
            }
            _ => {
                self.case.command = "bench collectives".into();
                self.case.args = vec!["bench".into(), "collectives".into()];
                let v = *self.rng.pick(&["allreduce", "bcast"]);
                self.arg("--op", v);
                self.arg("--ranks", "2,4");
                self.arg("--sizes", "8,1K");
                self.arg("--iters", "2");
                if self.rng.one_in(2) {
                    self.arg("--backend", "sim");
                }
            }
        }
        if self.rng.one_in(3) {
            self.switch("--json");
        }
        self.arg("--plot", "p.svg");
        self.case.check = Check::Plot {
            path: "p.svg".into(),
        };
    }
}

/// Case `index` of a run seeded with `seed`.
pub(crate) fn generate(corpus: &Corpus, seed: u64, index: u64) -> Case {
    let mut g = Gen {
        corpus,
        rng: Rng::for_case(seed, index),
        case: Case {
            index,
            command: String::new(),
            args: Vec::new(),
            files: Vec::new(),
            fifos: Vec::new(),
            stdout_closed: false,
            notes: Vec::new(),
            check: Check::Exit,
        },
    };
    let pick = g.rng.below(100);
    let command = match pick {
        0..=51 => "solve",
        52..=63 => "compare",
        64..=73 => "plan",
        74..=81 => "gen",
        82..=93 => "bench",
        _ => "edge",
    };
    g.case.command = command.to_string();
    match command {
        "solve" => g.solve(),
        "compare" => g.compare(),
        "plan" => g.plan(),
        "gen" => g.gen(),
        "bench" => g.bench(),
        _ => g.edge(),
    }
    g.case
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A corpus without the binary: two matrices, one fabric, one config, a few values.
    pub(crate) fn corpus() -> Corpus {
        let mut values = Values::default();
        values.add_help(
            "solve",
            "Usage: krylov solve [OPTIONS] <MATRIX>\n\nOptions:\n      --method <METHOD>\n          Solver method [default: cg] [possible values: cg, ccg, pipecg,\n          cacg, cbcg, cbcgr]\n  -o, --basis <BASIS>  Basis [possible values: monomial, newton, chebyshev]\n      --json  Print\n",
        );
        Corpus {
            matrices: vec![Input {
                name: "tiny".into(),
                bytes: b"%%MatrixMarket matrix coordinate real symmetric\n2 2 3\n1 1 4\n2 1 -1\n2 2 4\n".to_vec(),
                rows: 2,
            }],
            fabrics: vec![Input {
                name: "f".into(),
                bytes: b"name = \"f\"\nforward_us = 0.2\n".to_vec(),
                rows: 0,
            }],
            presets: vec!["peach2".into()],
            configs: vec![Input {
                name: "c".into(),
                bytes: b"method = \"cacg\"\nk = 4\n".to_vec(),
                rows: 0,
            }],
            values,
        }
    }

    #[test]
    fn help_values_are_parsed_across_wrapped_lines() {
        let c = corpus();
        assert_eq!(
            c.values.get("solve", "--method"),
            ["cg", "ccg", "pipecg", "cacg", "cbcg", "cbcgr"]
        );
        assert_eq!(
            c.values.get("solve", "--basis"),
            ["monomial", "newton", "chebyshev"]
        );
        assert!(c.values.get("solve", "--json").is_empty());
    }

    #[test]
    fn cases_repeat_and_vary() {
        let c = corpus();
        let a: Vec<Vec<String>> = (0..50).map(|i| generate(&c, 1, i).args).collect();
        let b: Vec<Vec<String>> = (0..50).map(|i| generate(&c, 1, i).args).collect();
        assert_eq!(a, b);
        let commands: std::collections::BTreeSet<String> =
            (0..300).map(|i| generate(&c, 1, i).command).collect();
        for want in [
            "solve",
            "compare",
            "plan",
            "gen",
            "bench collectives",
            "bench pingpong",
            "bench neighbor",
        ] {
            assert!(
                commands.contains(want),
                "{want} never generated: {commands:?}"
            );
        }
        assert_ne!(
            a,
            (0..50).map(|i| generate(&c, 2, i).args).collect::<Vec<_>>()
        );
    }

    #[test]
    fn every_edge_class_of_issue_47_is_generated() {
        let c = corpus();
        let notes: Vec<String> = (0..3000)
            .flat_map(|i| generate(&c, 1, i).notes)
            .filter(|n| n.starts_with("edge: "))
            .collect();
        for want in [
            "edge: pricing under a memory limit",
            "below attainable accuracy",
            "edge: b of entries",
            "edge: x0 of entries",
            "edge: diagonal entry",
            "edge: duplicates",
            "edge: --plot with stdout closed",
        ] {
            assert!(notes.iter().any(|n| n.contains(want)), "{want}: {notes:?}");
        }
        // A closed stdout always comes with a plot to check.
        for i in 0..3000 {
            let case = generate(&c, 1, i);
            if case.stdout_closed {
                assert!(matches!(case.check, Check::Plot { .. }), "{:?}", case.args);
                assert!(case.args.iter().any(|a| a == "--plot"));
            }
        }
    }

    #[test]
    fn solve_checks_name_files_the_case_writes() {
        let c = corpus();
        let mut checked = 0;
        for i in 0..400 {
            let case = generate(&c, 3, i);
            if let Check::Solve {
                matrix,
                rhs,
                output,
            } = &case.check
            {
                assert!(case.args.iter().any(|a| a == "--json"));
                if !matrix.is_empty() {
                    assert!(case.file(matrix).is_some(), "{case:?}");
                }
                if let Some(Rhs::File(f)) = rhs {
                    assert!(case.file(f).is_some(), "{case:?}");
                    assert!(case.args.windows(2).any(|w| w[0] == "--rhs" && &w[1] == f));
                }
                if let Some(o) = output {
                    assert!(case
                        .args
                        .windows(2)
                        .any(|w| w[0] == "--output" && &w[1] == o));
                }
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked}");
    }
}
