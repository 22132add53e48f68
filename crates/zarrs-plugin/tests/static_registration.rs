//! zarrs finds the codec without a call: naming the crate once links it, which registers it.

use amrzip_amr::{IBox, Layout};
use amrzip_codec::DType;
use amrzip_store::metadata::BoundMode;
use amrzip_store::{write_snapshot, BoxData, FieldSpec, LevelSpec, SnapshotSpec, Values, WriteOptions};
use amrzip_zarrs as _;
use std::sync::Arc;
use zarrs::array::Array;
use zarrs::filesystem::FilesystemStore;
use zarrs::storage::StoreKey;
use zarrs_zip::ZipStorageAdapter;

#[test]
fn zarrs_reads_a_snapshot_with_the_crate_only_linked() {
    let store = std::env::temp_dir().join(format!("amrzip-zarrs-static-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&store);
    let domain = IBox::new(vec![0, 0], vec![19, 11]);
    let values: Vec<f64> = (0..240).map(|i| (i as f64 * 0.1).sin()).collect();
    let spec = SnapshotSpec {
        node: vec![false; 2],
        fields: vec![FieldSpec { name: "u".into(), dtype: DType::F64, mode: BoundMode::Abs, bound: 1e-6 }],
        levels: vec![LevelSpec { domain: domain.clone(), ref_ratio: vec![1, 1], dx: vec![0.05; 2], boxes: vec![domain], owners: vec![0] }],
        prob_lo: vec![0.0; 2],
        prob_hi: vec![1.0, 0.6],
        coord_sys: 0,
        time: 0.0,
        step: 0,
        source: serde_json::json!({}),
    };
    let data = vec![vec![vec![BoxData { values: Values::F64(&values), layout: Layout::Fortran, ghost: vec![] }]]];
    write_snapshot(&store, "s", &spec, &data, &WriteOptions::default(), &mut |_, _| Ok(())).unwrap();

    let files = Arc::new(FilesystemStore::new(&store).unwrap());
    let storage = Arc::new(ZipStorageAdapter::new(files, StoreKey::new("s.zarr.zip").unwrap()).unwrap());
    let array = Array::open(storage, "/level_0").unwrap();
    let got: Vec<f64> = array.retrieve_array_subset(&array.subset_all()).unwrap();
    // C order (x slowest) of values written x fastest.
    for (k, v) in got.iter().enumerate() {
        let (i, j) = (k / 12, k % 12);
        assert!((v - values[j * 20 + i]).abs() <= 1e-6, "({i}, {j}): {v}");
    }
    std::fs::remove_dir_all(&store).unwrap();
}
