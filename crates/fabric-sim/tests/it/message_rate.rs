//! The device message rate (`dma.message_rate_mps`, LogGP's gap g): the engine against the
//! mechanism's own closed form, its validation, and the data-sheet values of the presets
//! that carry it.

use castack_fabric_sim::{Endpoint, Fabric, FabricConfig, FabricError, Mechanism, Transfer};

/// Node 0 puts `bytes` to each of nodes `1..=m`, all released at time 0.
fn fan_out(m: usize, bytes: u64) -> Vec<Transfer> {
    (1..=m)
        .map(|d| Transfer::new(Endpoint::host(0), Endpoint::host(d), bytes, Mechanism::Auto))
        .collect()
}

/// `name`'s preset with its message rate replaced.
fn with_rate(name: &str, rate: Option<f64>) -> Fabric {
    let mut c = FabricConfig::preset(name).unwrap();
    c.dma.message_rate_mps = rate;
    Fabric::new(c).unwrap()
}

fn gap(f: &Fabric) -> f64 {
    1.0 / (f.config().dma.message_rate_mps.unwrap() * 1e6)
}

#[test]
fn presets_carry_their_data_sheet_message_rates() {
    for (name, want) in [
        ("ofp", Some(160.0)),
        ("ito", Some(150.0)),
        ("ib-qdr", None),
        ("peach2", None),
        ("tofu-fx10", None),
        ("fx100", None),
    ] {
        let got = FabricConfig::preset(name).unwrap().dma.message_rate_mps;
        assert_eq!(got, want, "{name}");
    }
}

/// 8 B at 12.5 GB/s is 0.64 ns of data, a tenth of the gap: the messages never share a
/// resource, so message i (in posting order) ends exactly i gaps after it would alone.
#[test]
fn small_messages_of_one_device_start_one_gap_apart() {
    for name in ["ito", "ofp"] {
        let f = Fabric::preset(name).unwrap();
        let g = gap(&f);
        let ts = fan_out(64, 8);
        let fin = f.price(&ts).unwrap();
        for (i, (t, got)) in ts.iter().zip(&fin).enumerate() {
            let want = f.estimate(t).unwrap() + i as f64 * g;
            assert!(
                (got - want).abs() <= 1e-12 * want,
                "{name}: message {i} ends at {got:e} s, closed form {want:e} s"
            );
        }
        // Without the rate all 64 start together and only share the injection link: each
        // ends within the 512 B of all of them at 12.5 GB/s (41 ns) of its time alone.
        let free = with_rate(name, None).price(&ts).unwrap();
        for (t, got) in ts.iter().zip(&free) {
            let alone = f.estimate(t).unwrap();
            assert!(*got >= alone && *got <= alone + 512.0 / 12.5e9 * (1.0 + 1e-9), "{name}");
        }
    }
}

/// Large messages are bound by the injection link, not by the gap: the rate moves the last
/// one's end by less than the gaps themselves.
#[test]
fn the_gap_does_not_slow_bandwidth_bound_messages() {
    for name in ["ito", "ofp"] {
        let f = Fabric::preset(name).unwrap();
        let ts = fan_out(32, 1 << 20);
        let last = |f: &Fabric| f.price(&ts).unwrap().into_iter().fold(0.0, f64::max);
        let (with, without) = (last(&f), last(&with_rate(name, None)));
        assert!(with >= without, "{name}: {with:e} < {without:e}");
        assert!(with - without <= 32.0 * gap(&f), "{name}: {with:e} vs {without:e}");
        // And the link is the bound: 32 MiB at 12.5 GB/s.
        assert!(without >= (32u64 << 20) as f64 / 12.5e9, "{name}: {without:e}");
    }
}

#[test]
fn a_message_rate_must_be_at_least_one_per_second() {
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-7] {
        let mut c = FabricConfig::preset("ito").unwrap();
        c.dma.message_rate_mps = Some(bad);
        match c.validate() {
            Err(FabricError::Invalid { field, .. }) => {
                assert_eq!(field, "dma.message_rate_mps", "{bad}")
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    let mut c = FabricConfig::preset("ito").unwrap();
    c.dma.message_rate_mps = Some(1e-6);
    c.validate().unwrap();
}
