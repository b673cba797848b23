//! The sim backend's fabric: `--fabric NAME|PATH` (an embedded preset by name, else a TOML
//! file), checked against the memory budget before it is built, and the endpoint memory and
//! transfer mechanism the benches run it with.

use castack_collectives::fabric_sim::{Fabric, FabricConfig, FabricError, MemBudget};
use castack_collectives::{SimMechanism, SimMemory, SimOptions};

use crate::args::Memory;
use crate::budget::over;
use crate::exit::{bad, CliError};

/// The sim backend as the benches configure it.
#[derive(Debug, Clone)]
pub(crate) struct SimBackend {
    pub(crate) fabric: Fabric,
    pub(crate) options: SimOptions,
    /// The fabric's name, for the rows.
    pub(crate) name: String,
    /// `host` or `device`, for the rows.
    pub(crate) memory: &'static str,
}

/// The fabric `--fabric` names (a preset or a TOML path; default peach2), its size checked
/// against `budget` before it is built.
pub(crate) fn load_fabric(spec: Option<&str>, budget: MemBudget) -> Result<Fabric, CliError> {
    load_fabric_for("--fabric", spec.unwrap_or("peach2"), budget)
}

/// The fabric `spec` names for `flag` (an embedded preset by name, else a TOML file), its
/// size checked against `budget` before it is built; errors name `flag`.
pub(crate) fn load_fabric_for(
    flag: &str,
    spec: &str,
    budget: MemBudget,
) -> Result<Fabric, CliError> {
    let preset = castack_collectives::fabric_sim::PRESETS
        .iter()
        .any(|(n, _)| *n == spec);
    let config = if preset {
        FabricConfig::preset(spec)
    } else {
        let path = std::path::Path::new(spec);
        if !path.exists() {
            let names: Vec<&str> = castack_collectives::fabric_sim::PRESETS
                .iter()
                .map(|(n, _)| *n)
                .collect();
            return Err(bad(format!(
                "{flag} {spec}: neither a preset ({}) nor a file",
                names.join(", ")
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(format!("{flag} {spec}: {e}")))?;
        FabricConfig::from_toml_str_within(&text, budget)
    }
    .map_err(|e| fabric_error_for(flag, spec, e))?;
    Fabric::new_within(config, budget).map_err(|e| fabric_error_for(flag, spec, e))
}

/// A fabric that does not load: bad input (exit 2), with how to raise the budget when the
/// fabric is over it.
pub(crate) fn fabric_error(spec: &str, e: FabricError) -> CliError {
    fabric_error_for("--fabric", spec, e)
}

/// [`fabric_error`] for the fabric that `flag` names.
fn fabric_error_for(flag: &str, spec: &str, e: FabricError) -> CliError {
    match e {
        FabricError::OverBudget { .. } => over(format!("{flag} {spec}: {e}")),
        _ => bad(format!("{flag} {spec}: {e}")),
    }
}

/// The sim backend for `--fabric`, `--memory` and a mechanism.
pub(crate) fn sim_backend(
    fabric: Option<&str>,
    memory: Memory,
    mechanism: SimMechanism,
    budget: MemBudget,
) -> Result<SimBackend, CliError> {
    let fabric = load_fabric(fabric, budget)?;
    let (memory, label) = match memory {
        Memory::Host => (SimMemory::Host, "host"),
        Memory::Device => (SimMemory::Gpu, "device"),
    };
    Ok(SimBackend {
        name: fabric.config().name.clone(),
        fabric,
        options: SimOptions {
            memory,
            mechanism,
            ..SimOptions::default()
        },
        memory: label,
    })
}
