//! [`Method`]: the registry of the CG family (one file per method under `cg/`), a leaf that
//! the settings and the methods both name.

use serde::{Deserialize, Serialize};

/// The method registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Hestenes-Stiefel CG: 1 SpMV, 2 reductions per iteration.
    #[default]
    Cg,
    /// Chronopoulos-Gear CG: 1 SpMV, 1 fused reduction per iteration.
    Ccg,
    /// Pipelined CG (Ghysels-Vanroose): 1 SpMV, 1 reduction overlapped with it.
    Pipecg,
    /// Block CG on an s-step basis: k SpMVs, 2 reductions per k steps.
    Cbcg,
    /// Block CG on an s-step basis, Gram matrix updated: k SpMVs, 1 reduction per k steps.
    Cbcgr,
    /// Communication-avoiding CG (Hoemmen/Carson): 2s-1 SpMVs, 1 reduction per s steps.
    Cacg,
    /// Predict-and-recompute CG (Chen-Carson): 1 SpMV, 1 reduction per iteration.
    Prcg,
    /// Pipelined predict-and-recompute CG (Chen-Carson): 2 SpMVs, 1 reduction overlapped
    /// with them.
    Pipeprcg,
    /// Gropp's asynchronous CG: 1 SpMV, 2 reductions, each overlapped (with `M^-1`, with
    /// the SpMV).
    Groppcg,
    /// p(l)-CG, deep pipelined CG (Cornelis-Cools-Vanroose): 1 SpMV, 1 reduction per
    /// iteration, overlapped with the next `l` (`depth`) SpMVs.
    Plcg,
}

impl Method {
    /// Every method.
    pub const ALL: &'static [Method] = &[
        Method::Cg,
        Method::Ccg,
        Method::Pipecg,
        Method::Cbcg,
        Method::Cbcgr,
        Method::Cacg,
        Method::Prcg,
        Method::Pipeprcg,
        Method::Groppcg,
        Method::Plcg,
    ];

    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Method::Cg => "cg",
            Method::Ccg => "ccg",
            Method::Pipecg => "pipecg",
            Method::Cbcg => "cbcg",
            Method::Cbcgr => "cbcgr",
            Method::Cacg => "cacg",
            Method::Prcg => "prcg",
            Method::Pipeprcg => "pipeprcg",
            Method::Groppcg => "groppcg",
            Method::Plcg => "plcg",
        }
    }

    /// Whether the method works in blocks of `k` CG-equivalent steps with a basis (its
    /// report carries `k` and `basis`).
    pub fn is_s_step(self) -> bool {
        match self {
            Method::Cg
            | Method::Ccg
            | Method::Pipecg
            | Method::Prcg
            | Method::Pipeprcg
            | Method::Groppcg
            | Method::Plcg => false,
            Method::Cbcg | Method::Cbcgr | Method::Cacg => true,
        }
    }

    /// One line on the method.
    pub fn description(self) -> &'static str {
        match self {
            Method::Cg => "Hestenes-Stiefel CG: 1 SpMV and 2 reductions per iteration",
            Method::Ccg => "Chronopoulos-Gear CG: 1 SpMV and 1 fused reduction (r.r, r.Ar) per iteration",
            Method::Pipecg => "pipelined CG (Ghysels-Vanroose): 1 SpMV and 1 reduction per iteration, overlapped",
            Method::Cbcg => "block CG on an s-step basis (Chronopoulos-Gear with monomial): k SpMVs and 2 reductions per k steps",
            Method::Cbcgr => "block CG on an s-step basis with the Gram matrix updated: k SpMVs and 1 reduction per k steps",
            Method::Cacg => "communication-avoiding CG (Hoemmen/Carson): 2s-1 SpMVs and 1 reduction per s steps",
            Method::Prcg => "predict-and-recompute CG (Chen-Carson): 1 SpMV and 1 reduction per iteration",
            Method::Pipeprcg => "pipelined predict-and-recompute CG (Chen-Carson): 2 SpMVs and 1 reduction per iteration, overlapped",
            Method::Groppcg => "Gropp's asynchronous CG: 1 SpMV and 2 reductions per iteration, each overlapped (with M^-1, with the SpMV)",
            Method::Plcg => "p(l)-CG, deep pipelined CG (Cornelis-Cools-Vanroose): 1 SpMV and 1 reduction per iteration, overlapped with the next l (--depth) SpMVs",
        }
    }
}

castack_collectives::impl_registry!(Method, "method");
