//! Snapshot files read through zarrs: every level array, whole and in regions crossing shards,
//! holds bit for bit what the store's own reader gives (NaN where no cell is stored), within
//! each field's bound of the written values; version-1 snapshot folders too. Writing through
//! zarrs, damaged chunks and bad configurations give errors; damaged files never a panic.

use amrzip_amr::{IBox, Layout};
use amrzip_codec::DType;
use amrzip_store::metadata::BoundMode;
use amrzip_store::{write_snapshot, BoxData, Covered, FieldSpec, LevelSpec, Snapshot, SnapshotEntry, SnapshotSpec, Values, WriteOptions};
use amrzip_zarrs::AmrCodec;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zarrs::array::codec::api::ArrayToBytesCodecTraits;
use zarrs::array::{data_type, Array, ArraySubset, CodecOptions, FillValue};
use zarrs::filesystem::FilesystemStore;
use zarrs::storage::store::MemoryStore;
use zarrs::storage::{ListableStorageTraits, ReadableStorageTraits, StoreKey, StorePrefix, WritableStorageTraits};
use zarrs_zip::ZipStorageAdapter;

#[path = "../../store/tests/support/damage.rs"]
mod damage;

/// What was written at cell `c` of a level with spacing `dx`.
fn value(field: usize, c: &[i64], dx: f64) -> f64 {
    let [x, y, z] = [0, 1, 2].map(|d| (c[d] as f64 + 0.5) * dx);
    if field == 0 {
        (7.0 * x).sin() * (5.0 * y).cos() + z * z
    } else {
        1.0 + 40.0 * (-((x - 0.4).powi(2) + (y - 0.5).powi(2) + (z - 0.6).powi(2)) / 0.02).exp()
    }
}

fn b(lo: [i64; 3], hi: [i64; 3]) -> IBox {
    IBox::new(lo.to_vec(), hi.to_vec())
}

/// Two 3-D levels whose domains start off the origin and end inside a chunk; the boxes cut
/// chunks (of 4 cells, forced) off their edges, and leave part of the coarse level unstored.
fn levels() -> Vec<(IBox, Vec<IBox>, f64)> {
    vec![
        (b([2, 2, 2], [24, 24, 24]), vec![b([2, 2, 2], [12, 24, 24]), b([13, 2, 2], [24, 16, 24])], 1.0 / 23.0),
        (b([4, 4, 4], [49, 49, 49]), vec![b([10, 13, 9], [26, 33, 29]), b([27, 13, 9], [37, 21, 19])], 1.0 / 46.0),
    ]
}

/// Writes snapshot `name` of the fields `fields` (`0`: float64, absolute bound; `1`: float32,
/// relative bound) into `store`, returning its file.
fn write(store: &Path, name: &str, fields: &[usize]) -> PathBuf {
    let levels = levels();
    // [level][field][box], Fortran order (x fastest), no ghost cells.
    let mut f64s: Vec<Vec<Vec<f64>>> = Vec::new();
    let mut f32s: Vec<Vec<Vec<f32>>> = Vec::new();
    for (_, boxes, dx) in &levels {
        let mut a = Vec::new();
        let mut c = Vec::new();
        for bx in boxes {
            let (mut va, mut vc) = (Vec::new(), Vec::new());
            for k in bx.lo[2]..=bx.hi[2] {
                for j in bx.lo[1]..=bx.hi[1] {
                    for i in bx.lo[0]..=bx.hi[0] {
                        va.push(value(0, &[i, j, k], *dx));
                        vc.push(value(1, &[i, j, k], *dx) as f32);
                    }
                }
            }
            a.push(va);
            c.push(vc);
        }
        f64s.push(a);
        f32s.push(c);
    }
    let specs = [
        FieldSpec { name: "wave".into(), dtype: DType::F64, mode: BoundMode::Abs, bound: 1e-4 },
        FieldSpec { name: "blob".into(), dtype: DType::F32, mode: BoundMode::Rel, bound: 1e-3 },
    ];
    let spec = SnapshotSpec {
        node: vec![false; 3],
        fields: fields.iter().map(|&f| FieldSpec { name: specs[f].name.clone(), ..specs[f] }).collect(),
        levels: levels
            .iter()
            .enumerate()
            .map(|(l, (domain, boxes, dx))| LevelSpec {
                domain: domain.clone(),
                ref_ratio: vec![if l == 0 { 2 } else { 1 }; 3],
                dx: vec![*dx; 3],
                boxes: boxes.clone(),
                owners: (0..boxes.len() as i64).collect(),
            })
            .collect(),
        prob_lo: vec![2.0 / 23.0; 3],
        prob_hi: vec![25.0 / 23.0; 3],
        coord_sys: 0,
        time: 1.5,
        step: 100,
        source: serde_json::json!({"test": "amrzip-zarrs"}),
    };
    let values: Vec<Vec<Vec<BoxData>>> = (0..levels.len())
        .map(|l| {
            fields
                .iter()
                .map(|&f| {
                    let boxes = levels[l].1.len();
                    (0..boxes)
                        .map(|i| BoxData {
                            values: if f == 0 { Values::F64(&f64s[l][i]) } else { Values::F32(&f32s[l][i]) },
                            layout: Layout::Fortran,
                            ghost: vec![],
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    let options = WriteOptions { unit: Some(2), chunk: Some(4), ..WriteOptions::default() };
    write_snapshot(store, name, &spec, &values, &options, &mut |_, _| Ok(())).unwrap().path
}

/// The store's own reading of field `f` over `region`, in the field's type widened to float64.
fn store_read(s: &Snapshot, f: usize, level: usize, region: &IBox) -> Vec<f64> {
    match s.meta.dtypes[f] {
        DType::F64 => s.read::<f64>(f, level, region, Covered::Nan, false).unwrap(),
        DType::F32 => s.read::<f32>(f, level, region, Covered::Nan, false).unwrap().into_iter().map(f64::from).collect(),
    }
}

/// Bit for bit, NaN where NaN.
fn assert_same(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{what}: element {k}: zarrs {a} vs store {b}");
    }
}

/// The cells of `level` over array ranges `ranges` (spatial, from the index space's corner).
fn region(s: &Snapshot, level: usize, ranges: &[std::ops::Range<u64>]) -> IBox {
    let space = s.meta.index_space(level);
    let lo: Vec<i64> = ranges.iter().zip(&space.lo).map(|(r, l)| l + r.start as i64).collect();
    let hi: Vec<i64> = ranges.iter().zip(&space.lo).map(|(r, l)| l + r.end as i64 - 1).collect();
    IBox::new(lo, hi)
}

/// Reads `ranges` (field first) of `array` with zarrs and the same cells with the store.
fn compare<S: ReadableStorageTraits + ?Sized + 'static>(array: &Array<S>, s: &Snapshot, level: usize, ranges: &[std::ops::Range<u64>]) {
    let got: Vec<f64> = array.retrieve_array_subset(&ArraySubset::new_with_ranges(ranges)).unwrap();
    let cells = region(s, level, &ranges[1..]);
    let want: Vec<f64> = ranges[0].clone().flat_map(|f| store_read(s, f as usize, level, &cells)).collect();
    assert_same(&got, &want, &format!("level {level} {ranges:?}"));
}

fn contains(bx: &IBox, c: &[i64]) -> bool {
    c.iter().zip(bx.lo.iter().zip(&bx.hi)).all(|(x, (l, h))| l <= x && x <= h)
}

/// Stored: in a box of the level and under no box of the next (coarsened by 2).
fn stored(level: usize, c: &[i64]) -> bool {
    let levels = levels();
    let finer_covers = levels.get(level + 1).is_some_and(|(_, boxes, _)| {
        boxes.iter().any(|fb| {
            contains(&IBox::new(fb.lo.iter().map(|x| x.div_euclid(2)).collect(), fb.hi.iter().map(|x| x.div_euclid(2)).collect()), c)
        })
    });
    levels[level].1.iter().any(|bx| contains(bx, c)) && !finer_covers
}

/// What docs/zarr.md shows: the snapshot file through zarrs_zip, a level through zarrs.
#[test]
fn every_level_reads_through_zarrs_as_the_store_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("levels");
    let path = write(&store, "plt00100", &[0, 1]);
    let s = Snapshot::open(&SnapshotEntry::at(&path).unwrap()).unwrap();
    let bounds = [1e-4, s.meta.bounds[1].abs];
    assert!(bounds[1] > 0.0);

    let files = Arc::new(FilesystemStore::new(&store).unwrap());
    let storage = Arc::new(ZipStorageAdapter::new(files, StoreKey::new("plt00100.zarr.zip").unwrap()).unwrap());
    for level in 0..2 {
        let array = Array::open(storage.clone(), &format!("/level_{level}")).unwrap();
        let space = s.meta.index_space(level);
        let n: Vec<u64> = (0..3).map(|d| (space.hi[d] - space.lo[d] + 1) as u64).collect();
        assert_eq!(array.shape(), [2, n[0], n[1], n[2]]);
        assert_eq!(array.data_type().name_v3().as_deref(), Some("float64"));
        // Shards: the regions below cross their boundaries.
        let shard: Vec<u64> = array.chunk_shape(&[0, 0, 0, 0]).unwrap()[1..].iter().map(|d| d.get()).collect();
        assert!(array.chunk_grid_shape()[1..].iter().all(|&g| g > 1), "level {level}: one shard per axis {shard:?}");

        // The whole array: as the store reads it, within bounds of what was written, NaN
        // exactly where no cell is stored.
        let all: Vec<f64> = array.retrieve_array_subset(&array.subset_all()).unwrap();
        let cells = (n[0] * n[1] * n[2]) as usize;
        let dx = levels()[level].2;
        let mut k = 0;
        for (f, values) in all.chunks(cells).enumerate() {
            assert_same(values, &store_read(&s, f, level, &space), &format!("level {level} field {f}"));
            for i in space.lo[0]..=space.hi[0] {
                for j in space.lo[1]..=space.hi[1] {
                    for l in space.lo[2]..=space.hi[2] {
                        let (c, v) = ([i, j, l], all[k]);
                        if stored(level, &c) {
                            let want = if f == 0 { value(0, &c, dx) } else { value(1, &c, dx) as f32 as f64 };
                            assert!((v - want).abs() <= bounds[f], "level {level} field {f} {c:?}: {v} vs {want}");
                        } else {
                            assert!(v.is_nan(), "level {level} field {f} {c:?}: {v} where no cell is stored");
                        }
                        k += 1;
                    }
                }
            }
        }
        // float32 values widened exactly: narrowing back changes nothing.
        assert!(all[cells..].iter().all(|&v| v.is_nan() || f64::from(v as f32) == v));

        // Regions around the first shard corner, from it to the array's (partial) last
        // chunks, one field alone, a slab across every shard, one cell.
        let around: Vec<_> = (0..3).map(|d| shard[d] - 3..(shard[d] + 2).min(n[d])).collect();
        let to_end: Vec<_> = (0..3).map(|d| shard[d] - 1..n[d]).collect();
        compare(&array, &s, level, &[0..2, around[0].clone(), around[1].clone(), around[2].clone()]);
        compare(&array, &s, level, &[1..2, to_end[0].clone(), to_end[1].clone(), to_end[2].clone()]);
        compare(&array, &s, level, &[0..1, 0..n[0], shard[1]..shard[1] + 1, 0..n[2]]);
        compare(&array, &s, level, &[1..2, n[0] - 1..n[0], n[1] - 1..n[1], n[2] - 1..n[2]]);
    }
}

#[test]
fn open_snapshot_opens_a_file_by_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("open");
    let path = write(&store, "s", &[0, 1]);
    let s = Snapshot::open(&SnapshotEntry::at(&path).unwrap()).unwrap();
    let array = Array::open(amrzip_zarrs::open_snapshot(&path).unwrap(), "/level_1").unwrap();
    compare(&array, &s, 1, &[0..2, 0..46, 0..46, 0..46]);
    assert!(amrzip_zarrs::open_snapshot(store.join("none.zarr.zip")).is_err());
    let not_zip = store.join("text.zarr.zip");
    std::fs::write(&not_zip, "not a zip file").unwrap();
    assert!(matches!(amrzip_zarrs::open_snapshot(&not_zip), Err(amrzip_zarrs::OpenError::Archive(_))));
}

#[test]
fn a_float32_snapshot_reads_as_float32() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("f32");
    let path = write(&store, "s", &[1]);
    let s = Snapshot::open(&SnapshotEntry::at(&path).unwrap()).unwrap();
    let storage = amrzip_zarrs::open_snapshot(&path).unwrap();
    for level in 0..2 {
        let array = Array::open(storage.clone(), &format!("/level_{level}")).unwrap();
        assert_eq!(array.data_type().name_v3().as_deref(), Some("float32"));
        let got: Vec<f32> = array.retrieve_array_subset(&array.subset_all()).unwrap();
        let want = s.read::<f32>(0, level, &s.meta.index_space(level), Covered::Nan, false).unwrap();
        assert_eq!(got.len(), want.len());
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())));
        assert!(got.iter().any(|v| !v.is_nan()));
    }
}

/// The entries of `prefix` in a snapshot file, copied into memory to be changed.
fn in_memory(path: &Path, prefix: &str) -> Arc<MemoryStore> {
    let zip = amrzip_zarrs::open_snapshot(path).unwrap();
    let memory = Arc::new(MemoryStore::new());
    for key in zip.list_prefix(&StorePrefix::new(prefix).unwrap()).unwrap() {
        memory.set(&key, zip.get(&key).unwrap().unwrap()).unwrap();
    }
    memory
}

/// The `amrzip.amr` configuration of a level array's zarr.json.
fn codec_configuration(zarr_json: &[u8]) -> serde_json::Map<String, serde_json::Value> {
    let meta: serde_json::Value = serde_json::from_slice(zarr_json).unwrap();
    meta["codecs"][0]["configuration"]["codecs"][0]["configuration"].as_object().unwrap().clone()
}

#[test]
fn writing_through_zarrs_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("write");
    let path = write(&store, "s", &[0, 1]);
    let memory = in_memory(&path, "level_0/");
    let array = Array::open(memory, "/level_0").unwrap();
    let chunk = array.chunk_shape(&[0, 0, 0, 0]).unwrap();
    let n = chunk.iter().map(|d| d.get() as usize).product();
    let e = array.store_chunk(&[0, 0, 0, 0], vec![1.0f64; n]).unwrap_err().to_string();
    assert!(e.contains("written by amrzip's snapshot writer"), "{e}");
}

/// Every level of a snapshot file read whole through zarrs.
fn read_file(path: &Path) -> Result<Vec<Vec<f64>>, Box<dyn std::error::Error>> {
    let storage = amrzip_zarrs::open_snapshot(path)?;
    (0..2)
        .map(|level| {
            let array = Array::open(storage.clone(), &format!("/level_{level}"))?;
            Ok(array.retrieve_array_subset::<Vec<f64>>(&array.subset_all())?)
        })
        .collect()
}

#[test]
fn damaged_chunks_give_errors_never_other_values() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("chunks");
    let path = write(&store, "s", &[0, 1]);
    let memory = in_memory(&path, "level_1/");
    let zarr_json = memory.get(&StoreKey::new("level_1/zarr.json").unwrap()).unwrap().unwrap();
    let meta: serde_json::Value = serde_json::from_slice(&zarr_json).unwrap();
    let shard = meta["chunk_grid"]["configuration"]["chunk_shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap());
    let inner = meta["codecs"][0]["configuration"]["chunk_shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap());
    let index_bytes = 16 * shard.zip(inner).map(|(s, i)| s / i).product::<u64>() as usize + 4;
    let good = Array::open(memory.clone(), "/level_1").unwrap();
    let expected: Vec<f64> = good.retrieve_array_subset(&good.subset_all()).unwrap();

    // Byte flips in the chunks of a shard (its index has a CRC-32C, which zarrs checks): a
    // chunk's block set has a CRC-32, so a damaged chunk is an error. Only a flip of a chunk's
    // position tag, which Zarr readers skip, leaves what it reads as written.
    let shards: Vec<StoreKey> = memory
        .list_prefix(&StorePrefix::new("level_1/c/").unwrap())
        .unwrap()
        .into_iter()
        .filter(|k| memory.get(k).unwrap().is_some())
        .collect();
    let mut rng = fastrand::Rng::with_seed(0x2545f4914f6cdd1d);
    let (rounds, mut refused) = (300, 0);
    for round in 0..rounds {
        let key = &shards[rng.usize(..shards.len())];
        let bytes = memory.get(key).unwrap().unwrap();
        let mut bad = bytes.to_vec();
        let chunks = bad.len() - index_bytes;
        for _ in 0..1 + round % 4 {
            bad[rng.usize(..chunks)] ^= 1 << rng.u32(..8);
        }
        memory.set(key, bad.into()).unwrap();
        match Array::open(memory.clone(), "/level_1").unwrap().retrieve_array_subset::<Vec<f64>>(&good.subset_all()) {
            Ok(v) => assert_same(&v, &expected, &format!("round {round}")),
            Err(e) => {
                assert!(e.to_string().contains("amrzip.amr"), "{e}");
                refused += 1;
            }
        }
        memory.set(key, bytes).unwrap();
    }
    assert!(refused > rounds * 9 / 10, "{refused} of {rounds} damaged shards refused");
}

/// Damage anywhere in a snapshot file (zip records, shard indexes, chunks, truncation):
/// zarrs' readers and this codec give an error or the values written, never a panic nor other
/// values, and never hang (rc-zip loops on some damaged central directories: open_snapshot
/// refuses those first). Unlike amrzip's own reader, a Zarr reader cannot tell every damage: a
/// shard whose zip entry lost its name reads as missing, NaN, as Zarr means a missing shard.
/// `AMRZIP_DAMAGE_ROUNDS=3000` runs longer.
#[test]
fn damaged_files_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("files");
    let path = write(&store, "s", &[0, 1]);
    let good = std::fs::read(&path).unwrap();
    let expected = read_file(&path).unwrap();
    let mut rng = fastrand::Rng::with_seed(0x9e3779b97f4a7c15);
    let rounds = std::env::var("AMRZIP_DAMAGE_ROUNDS").map_or(300, |r| r.parse().unwrap());
    let (mut refused, mut same) = (0, 0);
    for round in 0..rounds {
        let bad = damage::damage(&good, round, &mut rng);
        std::fs::write(&path, &bad).unwrap();
        match read_file(&path) {
            Ok(levels) => {
                let pairs = || levels.iter().flatten().zip(expected.iter().flatten());
                let lost = pairs().filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                assert!(pairs().all(|(a, b)| a.to_bits() == b.to_bits() || a.is_nan()), "round {round}: other values");
                same += usize::from(lost == 0);
            }
            Err(_) => refused += 1,
        }
    }
    eprintln!("damaged files: {refused} refused, {same} read as written, {} with cells lost (NaN)", rounds - refused - same);
    assert!(refused > rounds * 3 / 4, "{refused} of {rounds} damaged files refused");
}

/// Configurations no amrzip writer makes: zarrs cannot open the array. Chunk shapes of more
/// than one field or too large to allocate, and other data types, are errors of the codec.
#[test]
fn bad_configurations_and_shapes_give_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("config");
    let path = write(&store, "s", &[0, 1]);
    let memory = in_memory(&path, "level_1/");
    let meta_key = StoreKey::new("level_1/zarr.json").unwrap();
    let zarr_json = memory.get(&meta_key).unwrap().unwrap();
    for (key, value) in [
        ("version", serde_json::json!(9)),
        ("tables", serde_json::json!(["not base64!"])),
        ("fields", serde_json::json!([{"dtype": "int8", "unit": [2, 2, 2], "eb": 0.0, "offset": 0.0, "tables": [0, 1]}])),
        ("fields", serde_json::json!([{"dtype": "float64", "unit": [2, 2, 2], "eb": 0.0, "offset": 0.0, "tables": [0, 999]}])),
    ] {
        let mut meta: serde_json::Value = serde_json::from_slice(&zarr_json).unwrap();
        meta["codecs"][0]["configuration"]["codecs"][0]["configuration"][key] = value.clone();
        memory.set(&meta_key, serde_json::to_vec(&meta).unwrap().into()).unwrap();
        match Array::open(memory.clone(), "/level_1") {
            Ok(_) => panic!("opened with {key} = {value}"),
            Err(e) => assert!(e.to_string().contains("amrzip.amr"), "{e}"),
        }
    }

    let codec = Arc::new(AmrCodec::new(codec_configuration(&zarr_json)).unwrap());
    let shard = memory.get(&StoreKey::new("level_1/c/0/0/0/0").unwrap()).unwrap().unwrap_or_default();
    let nz = |v: &[u64]| v.iter().map(|&x| NonZeroU64::new(x).unwrap()).collect::<Vec<_>>();
    let opts = CodecOptions::default();
    let nan = FillValue::from(f64::NAN);
    for shape in [nz(&[2, 4, 4, 4]), nz(&[1, 1 << 20, 1 << 20, 1 << 20]), nz(&[1, u64::MAX, u64::MAX, 2])] {
        let e = codec.decode(shard.to_vec().into(), &shape, &data_type::float64(), &nan, &opts).unwrap_err();
        assert!(e.to_string().contains("amrzip.amr"), "{shape:?}: {e}");
    }
    let e = codec.decode(shard.to_vec().into(), &nz(&[1, 4, 4, 4]), &data_type::int32(), &nan, &opts).unwrap_err();
    assert!(e.to_string().contains("amrzip.amr"), "{e}");
}

/// Version-1 stores (a folder per snapshot, an array per level and field, no shards): zarrs
/// reads their arrays through a file system store, the field's type from the array.
#[test]
fn version_1_snapshot_folders_read_too() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/store_before_range_coding");
    let s = Snapshot::open_in(&fixture, Some("step_000000")).unwrap();
    let files = Arc::new(FilesystemStore::new(&fixture).unwrap());
    for level in 0..s.meta.levels.len() {
        let array = Array::open(files.clone(), &format!("/step_000000/level_{level}/density")).unwrap();
        let got: Vec<f64> = array.retrieve_array_subset(&array.subset_all()).unwrap();
        let want = s.read::<f64>(0, level, &s.meta.index_space(level), Covered::Nan, false).unwrap();
        assert_same(&got, &want, &format!("version-1 level {level}"));
        assert!(got.iter().any(|v| !v.is_nan()));
    }
}

/// A shard renamed in the central directory only would read at another position, which a Zarr
/// reader cannot tell from its chunks: its local header still has the old name, and
/// `open_snapshot` refuses the file.
#[test]
fn a_shard_renamed_in_the_central_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir.path().join("renamed"), "s", &[0, 1]);
    let good = std::fs::read(&path).unwrap();
    assert!(amrzip_zarrs::open_snapshot(&path).is_ok());
    // The last occurrence of a shard's name is its central directory record.
    let name = b"level_1/c/0/1/1/1";
    let at = good.windows(name.len()).rposition(|w| w == name).expect("a level 1 shard");
    let mut bad = good.clone();
    bad[at + name.len() - 1] = b'7';
    std::fs::write(&path, &bad).unwrap();
    let err = amrzip_zarrs::open_snapshot(&path).err().expect("refused").to_string();
    assert!(err.contains("local header"), "{err}");
}
