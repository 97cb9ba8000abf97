//! Compiles `proto/` (Thanos's Rules and Info APIs) into the crate's messages, clients and
//! servers. protox parses the files in Rust, so the build needs no protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/thanos/rules.proto", "proto/thanos/info.proto"];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
