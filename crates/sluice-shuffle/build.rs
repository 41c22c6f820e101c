//! Generates the shuffle protocol's Rust types and gRPC stubs from
//! `proto/shuffle.proto`, with the `protoc` vendored by
//! `protoc-bin-vendored` (unless `PROTOC` names another), so a build needs no
//! system package.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_none() {
        let protoc = protoc_bin_vendored::protoc_bin_path()?;
        // SAFETY: build scripts are single-threaded; nothing else reads the
        // environment concurrently.
        unsafe { std::env::set_var("PROTOC", protoc) };
    }
    println!("cargo:rerun-if-changed=proto/shuffle.proto");
    tonic_prost_build::configure()
        .bytes(".")
        .compile_protos(&["proto/shuffle.proto"], &["proto"])?;
    Ok(())
}
