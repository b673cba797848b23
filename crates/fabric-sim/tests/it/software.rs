//! The library's software cost and system noise (`[software]`, `[noise]`): schedules priced
//! with them against the model's own closed form, their seeding, and their validation.

use castack_fabric_sim::{
    Endpoint, Fabric, FabricConfig, FabricError, Mechanism, MemoryKind, Noise, NoiseConfig,
    Placement, PricePut, PriceSchedule, PriceStep, SoftwareConfig, Transfer,
};

/// Recursive doubling over `p` (a power of two) ranks: in step s rank r puts 8 B to
/// r xor 2^s and waits for it.
fn doubling(p: usize) -> PriceSchedule {
    let steps = p.trailing_zeros() as usize;
    PriceSchedule {
        ranks: (0..p)
            .map(|r| {
                (0..steps)
                    .map(|s| PriceStep {
                        puts: vec![PricePut {
                            to: r ^ (1 << s),
                            bytes: 8,
                        }],
                        waits_for: vec![r ^ (1 << s)],
                        ..PriceStep::default()
                    })
                    .collect()
            })
            .collect(),
    }
}

/// Rank 0 puts 8 B to rank 1, which waits for it.
fn one_put() -> PriceSchedule {
    PriceSchedule {
        ranks: vec![
            vec![PriceStep {
                puts: vec![PricePut { to: 1, bytes: 8 }],
                ..PriceStep::default()
            }],
            vec![PriceStep {
                waits_for: vec![0],
                ..PriceStep::default()
            }],
        ],
    }
}

fn price(f: &Fabric, s: &PriceSchedule) -> Vec<f64> {
    let p = s.ranks.len();
    let placement = Placement::one_per_node(p, MemoryKind::Host);
    f.price_schedule(s, &placement, &vec![0.0; p], Mechanism::Auto)
        .unwrap()
}

fn ib(software: Option<SoftwareConfig>, noise: Option<NoiseConfig>) -> Fabric {
    let mut c = FabricConfig::preset("ib-qdr").unwrap();
    c.software = software;
    c.noise = noise;
    Fabric::new(c).unwrap()
}

fn noise(period_us: f64, detour_us: f64, seed: u64) -> NoiseConfig {
    NoiseConfig {
        period_us,
        detour_us,
        seed,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-18 + 1e-12 * b.abs()
}

/// Ranks in step pay the call cost once and the step cost once per step, on the critical
/// path: every rank of a 2^k-rank recursive doubling ends `call + k * step` later.
#[test]
fn software_cost_adds_call_plus_steps_along_the_critical_path() {
    let (call, step) = (3.5, 0.75);
    let sw = SoftwareConfig {
        call_us: call,
        step_us: step,
    };
    for p in [2, 8, 64] {
        let s = doubling(p);
        let base = price(&ib(None, None), &s);
        let with = price(&ib(Some(sw.clone()), None), &s);
        let k = p.trailing_zeros() as f64;
        for r in 0..p {
            let want = base[r] + (call + k * step) * 1e-6;
            assert!(
                close(with[r], want),
                "p {p} rank {r}: {} vs {want}",
                with[r]
            );
        }
    }
}

/// Absent sections change no bit (the engine-bits hashes pin the same for the presets).
#[test]
fn zero_costs_and_no_noise_price_as_without_the_model() {
    let s = doubling(8);
    let base = price(&ib(None, None), &s);
    let zero = SoftwareConfig {
        call_us: 0.0,
        step_us: 0.0,
    };
    assert_eq!(price(&ib(Some(zero), None), &s), base);
    // Noise without any CPU work to stretch: nothing to delay.
    assert_eq!(price(&ib(None, Some(noise(10.0, 9.0, 3))), &s), base);
}

/// One put under noise: rank 0's step cost is stretched by its node's detours before the
/// put leaves; rank 1 leaves when the data lands or when its own stretched cost is done.
#[test]
fn noise_delays_a_put_by_its_closed_form() {
    let step = 5.0;
    let alone = ib(None, None)
        .estimate(&Transfer::new(
            Endpoint::host(0),
            Endpoint::host(1),
            8,
            Mechanism::Auto,
        ))
        .unwrap();
    let mut hit = 0;
    for seed in 0..64 {
        let nc = noise(100.0, 30.0, seed);
        let noise = Noise::new(&nc);
        let f = ib(
            Some(SoftwareConfig {
                call_us: 0.0,
                step_us: step,
            }),
            Some(nc),
        );
        let fin = price(&f, &one_put());
        let posted = noise.finish(0, 0.0, step * 1e-6);
        let own = noise.finish(1, 0.0, step * 1e-6);
        assert!(close(fin[0], posted + alone), "seed {seed}: {fin:?}");
        assert!(
            close(fin[1], (posted + alone).max(own)),
            "seed {seed}: {fin:?}"
        );
        // Modeled runs repeat to the bit.
        assert_eq!(price(&f, &one_put()), fin);
        if posted > step * 1e-6 * (1.0 + 1e-9) {
            hit += 1;
        }
    }
    // With a 30% duty cycle some seeds put rank 0's cost into a detour, and most do not.
    assert!((5..=40).contains(&hit), "{hit} of 64 seeds hit a detour");
}

/// A collective waits for its slowest rank: with the same per-node noise, more ranks meet
/// more detours (Hoefler et al., SC10). Averaged over seeds, 64 ranks lose more per step
/// than 2.
#[test]
fn noise_is_amplified_by_the_slowest_rank() {
    let lost_per_step = |p: usize| {
        let s = doubling(p);
        let k = p.trailing_zeros() as f64;
        let sw = SoftwareConfig {
            call_us: 0.0,
            step_us: 2.0,
        };
        let quiet = price(&ib(Some(sw.clone()), None), &s);
        let mut sum = 0.0;
        for seed in 0..16 {
            let nc = noise(200.0, 20.0, seed);
            let noisy = price(&ib(Some(sw.clone()), Some(nc)), &s);
            let slowest = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
            sum += (slowest(&noisy) - slowest(&quiet)) / k;
        }
        sum / 16.0
    };
    let (two, many) = (lost_per_step(2), lost_per_step(64));
    assert!(
        many > 2.0 * two,
        "2 ranks {two:e} s/step, 64 ranks {many:e} s/step"
    );
}

#[test]
fn bad_software_and_noise_fields_are_one_line_errors() {
    let field_of = |c: FabricConfig| match c.validate() {
        Err(FabricError::Invalid { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    let mut c = FabricConfig::preset("ito").unwrap();
    c.software = Some(SoftwareConfig {
        call_us: -1.0,
        step_us: 0.0,
    });
    assert_eq!(field_of(c), "software.call_us");
    let mut c = FabricConfig::preset("ito").unwrap();
    c.software = Some(SoftwareConfig {
        call_us: 0.0,
        step_us: f64::NAN,
    });
    assert_eq!(field_of(c), "software.step_us");
    for (period, detour, field) in [
        (0.0, 0.0, "noise.period_us"),
        (10.0, -1.0, "noise.detour_us"),
        (10.0, 10.0, "noise.detour_us"),
    ] {
        let mut c = FabricConfig::preset("ito").unwrap();
        c.noise = Some(noise(period, detour, 0));
        assert_eq!(field_of(c), field);
    }
}

#[test]
fn the_sections_parse_from_toml_and_reject_unknown_keys() {
    let base = toml_of("ito");
    let ok = format!(
        "{base}\n[software]\ncall_us = 1.0\nstep_us = 0.5\n\n[noise]\nperiod_us = 1000.0\ndetour_us = 25.0\nseed = 7\n"
    );
    let c = FabricConfig::from_toml_str(&ok).unwrap();
    assert_eq!(c.software.unwrap().step_us, 0.5);
    assert_eq!(c.noise.unwrap().seed, 7);
    let bad = format!("{base}\n[noise]\nperiod_us = 1000.0\ndetour_us = 25.0\nphase = 1\n");
    assert!(FabricConfig::from_toml_str(&bad).is_err());
}

fn toml_of(name: &str) -> String {
    let path = format!(
        "{}/../../configs/fabrics/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path).unwrap()
}
