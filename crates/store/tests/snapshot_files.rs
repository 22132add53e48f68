//! Snapshot files through the store's Rust API alone: a written hierarchy reads back within its
//! bounds, and damaged files (every kind of byte flip and truncation) give errors, never a panic
//! or wrong values.

use amrzip_amr::{IBox, Layout};
use amrzip_codec::DType;
use amrzip_store::metadata::BoundMode;
use amrzip_store::{
    write_snapshot, BoxData, Covered, FieldSpec, LevelSpec, Snapshot, SnapshotEntry, SnapshotKind, SnapshotSpec, Values, WriteOptions,
};
use std::path::{Path, PathBuf};

#[path = "support/damage.rs"]
mod damage;

fn value(f: usize, i: i64, j: i64, scale: f64) -> f64 {
    let (x, y) = (i as f64 * scale, j as f64 * scale);
    if f == 0 {
        (3.0 * x).sin() * (2.0 * y).cos()
    } else {
        1.0 + 50.0 * (-((x - 0.5).powi(2) + (y - 0.5).powi(2)) / 0.01).exp()
    }
}

/// A two-level 2-D hierarchy of a float64 and a float32 field, with ghost cells, Fortran order.
struct Data {
    spec: SnapshotSpec,
    f64s: Vec<Vec<Vec<f64>>>,
    f32s: Vec<Vec<Vec<f32>>>,
    ghost: usize,
}

fn data() -> Data {
    let ghost = 1;
    let levels = vec![
        (IBox::new(vec![0, 0], vec![31, 31]), vec![IBox::new(vec![0, 0], vec![15, 31]), IBox::new(vec![16, 0], vec![31, 31])], 1.0 / 32.0),
        (IBox::new(vec![0, 0], vec![63, 63]), vec![IBox::new(vec![16, 16], vec![39, 47])], 1.0 / 64.0),
    ];
    let mut f64s = Vec::new();
    let mut f32s = Vec::new();
    for (_, boxes, dx) in &levels {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for bx in boxes {
            let (mut va, mut vb) = (Vec::new(), Vec::new());
            // Fortran order over the grown box: x fastest.
            for j in bx.lo[1] - ghost as i64..=bx.hi[1] + ghost as i64 {
                for i in bx.lo[0] - ghost as i64..=bx.hi[0] + ghost as i64 {
                    va.push(value(0, i, j, *dx));
                    vb.push(value(1, i, j, *dx) as f32);
                }
            }
            a.push(va);
            b.push(vb);
        }
        f64s.push(a);
        f32s.push(b);
    }
    let spec = SnapshotSpec {
        node: vec![false, false],
        fields: vec![
            FieldSpec { name: "wave".into(), dtype: DType::F64, mode: BoundMode::Abs, bound: 1e-4 },
            FieldSpec { name: "blob".into(), dtype: DType::F32, mode: BoundMode::Rel, bound: 1e-4 },
        ],
        levels: levels
            .iter()
            .enumerate()
            .map(|(l, (domain, boxes, dx))| LevelSpec {
                domain: domain.clone(),
                ref_ratio: if l == 0 { vec![2, 2] } else { vec![1, 1] },
                dx: vec![*dx, *dx],
                boxes: boxes.clone(),
                owners: vec![l as i64; boxes.len()],
            })
            .collect(),
        prob_lo: vec![0.0, 0.0],
        prob_hi: vec![1.0, 1.0],
        coord_sys: 0,
        time: 0.5,
        step: 7,
        source: serde_json::json!({"test": true}),
    };
    Data { spec, f64s, f32s, ghost }
}

fn write(store: &Path, name: &str, d: &Data) -> PathBuf {
    let values: Vec<Vec<Vec<BoxData>>> = (0..2)
        .map(|l| {
            vec![
                d.f64s[l].iter().map(|v| BoxData { values: Values::F64(v), layout: Layout::Fortran, ghost: vec![d.ghost; 2] }).collect(),
                d.f32s[l].iter().map(|v| BoxData { values: Values::F32(v), layout: Layout::Fortran, ghost: vec![d.ghost; 2] }).collect(),
            ]
        })
        .collect();
    let summary = write_snapshot(store, name, &d.spec, &values, &WriteOptions::default(), &mut |_, _| Ok(())).unwrap();
    summary.path
}

/// Every value a read can give, so that damaged files are exercised wherever they can fail.
fn read_everything(s: &Snapshot) -> amrzip_store::Result<Vec<f64>> {
    let mut out = Vec::new();
    for level in 0..s.meta.levels.len() {
        let region = s.meta.index_space(level);
        out.extend(s.read::<f64>(0, level, &region, Covered::Average, false)?);
        out.extend(s.read::<f32>(1, level, &region, Covered::Nan, true)?.iter().map(|&v| v as f64));
    }
    out.extend(s.read_boxes::<f64>(0, 0)?.into_iter().flatten().flatten());
    Ok(out)
}

#[test]
fn a_written_hierarchy_reads_back_within_its_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("round-trip");
    let d = data();
    let path = write(&store, "s", &d);
    let s = Snapshot::open(&SnapshotEntry::at(&path).unwrap()).unwrap();
    assert_eq!((s.meta.step, s.meta.time, s.meta.fields.len()), (7, 0.5, 2));
    for (f, bound) in [(0usize, 1e-4), (1, s.meta.bounds[1].abs)] {
        assert!(bound > 0.0);
        for (l, lev) in d.spec.levels.iter().enumerate() {
            for b in &lev.boxes {
                let got: Vec<f64> = if f == 0 {
                    s.read::<f64>(f, l, b, Covered::Nan, false).unwrap()
                } else {
                    s.read::<f32>(f, l, b, Covered::Nan, false).unwrap().iter().map(|&v| v as f64).collect()
                };
                let mut k = 0;
                for i in b.lo[0]..=b.hi[0] {
                    for j in b.lo[1]..=b.hi[1] {
                        let want = if f == 0 { value(0, i, j, lev.dx[0]) } else { value(1, i, j, lev.dx[0]) as f32 as f64 };
                        // Covered cells (level 0 under level 1) read NaN.
                        assert!(got[k].is_nan() || (got[k] - want).abs() <= bound, "field {f} level {l} ({i}, {j}): {} vs {want}", got[k]);
                        k += 1;
                    }
                }
            }
        }
    }
    // Whole levels decoded straight into box arrays read the same, to the bit, as box reads.
    for l in 0..2 {
        let whole = s.read_boxes::<f32>(1, l).unwrap();
        assert_eq!(whole.len(), 2 - l);
        for (k, boxes) in whole.iter().enumerate() {
            for (b, got) in d.spec.levels[l + k].boxes.iter().zip(boxes) {
                let one = s.read::<f32>(1, l + k, b, Covered::Average, false).unwrap();
                assert!(
                    one.len() == got.len() && one.iter().zip(got).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "level {} box {b:?}",
                    l + k
                );
                assert!(got.iter().all(|v| v.is_finite()));
            }
        }
    }
    assert!(s.read_boxes::<f64>(1, 0).is_err() && s.read_boxes::<f32>(1, 2).is_err() && s.read_boxes::<f32>(2, 0).is_err());
    assert!(s.verify().unwrap() > 0);
}

#[test]
fn damaged_files_give_errors_never_panics_or_wrong_values() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("damage");
    let d = data();
    let path = write(&store, "s", &d);
    let good = std::fs::read(&path).unwrap();
    let entry = SnapshotEntry { name: "s".into(), kind: SnapshotKind::File, path: path.clone() };
    let expected = read_everything(&Snapshot::open(&entry).unwrap()).unwrap();
    let same = |a: &[f64]| a.len() == expected.len() && a.iter().zip(&expected).all(|(x, y)| x.to_bits() == y.to_bits());
    let mut rng = fastrand::Rng::with_seed(0x9e3779b97f4a7c15);
    let mut failures = 0;
    for round in 0..600 {
        let bad = damage::damage(&good, round, &mut rng);
        std::fs::write(&path, &bad).unwrap();
        // Opening, reading and checking either fail cleanly or read exactly what was written:
        // a flip in bytes no reader looks at (a zip record's date) changes nothing.
        match Snapshot::open(&entry).and_then(|s| read_everything(&s).map(|v| (s, v))) {
            Ok((s, values)) => {
                assert!(same(&values), "round {round}: a damaged file read to other values");
                let _ = s.verify();
            }
            Err(e) => {
                assert!(!e.message.is_empty());
                failures += 1;
            }
        }
    }
    assert!(failures > 500, "{failures} of 600 damaged files refused");
}
