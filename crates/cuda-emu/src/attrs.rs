//! The emulated device: an NVIDIA H200 (SXM), compute capability 9.0.
//!
//! Sources: the CUDA C++ Programming Guide's table of technical specifications per compute
//! capability (9.0: block and grid limits, shared memory, registers, threads and blocks
//! per multiprocessor); NVIDIA's H100 Tensor Core GPU Architecture whitepaper (GH100 in
//! SXM5 form: 132 SMs, 50 MB of L2, 1,980 MHz boost) and the H200 data sheet (the same
//! GH100 with 141 GB of HBM3e at 4.8 TB/s over a 6,144-bit interface). The memory clock
//! is derived: 4.8e12 B/s = 2 (double data rate) x clock x 6144 / 8 B gives 3.125 GHz.
//! An attribute not listed is an error that names it (no value is made up).

use cudarc::driver::sys::CUdevice_attribute_enum as A;

/// The device name (the emulation says so in every report that prints it).
pub const NAME: &str = "NVIDIA H200 (castack emulated driver)";
/// Device memory in bytes: 141 GB (data sheet, decimal).
pub const TOTAL_MEMORY: usize = 141_000_000_000;
/// The driver version reported (CUDA 13.0, as the GPU machines' driver 580).
pub const DRIVER_VERSION: i32 = 13_000;
/// Compute capability.
pub const COMPUTE_CAPABILITY: (i32, i32) = (9, 0);

/// The value of attribute `attr` (a `CUdevice_attribute`), if emulated.
pub fn value(attr: i32) -> Option<i32> {
    let table: &[(A, i32)] = &[
        (A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64),
        (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, i32::MAX),
        (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65_535),
        (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65_535),
        (
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
            48 * 1024,
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            227 * 1024,
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            228 * 1024,
        ),
        (A::CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 64 * 1024),
        (A::CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32),
        (A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 64 * 1024),
        (
            A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
            64 * 1024,
        ),
        (A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32),
        (A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132),
        (A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1_980_000),
        (A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 3_125_000),
        (A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 6144),
        (A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 50 * 1024 * 1024),
        (
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            COMPUTE_CAPABILITY.0,
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            COMPUTE_CAPABILITY.1,
        ),
        (A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1),
        (A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1),
        (A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1),
        (A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1),
        (A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1),
        (A::CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1),
        (A::CU_DEVICE_ATTRIBUTE_INTEGRATED, 0),
        (A::CU_DEVICE_ATTRIBUTE_TCC_DRIVER, 0),
        (A::CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, 0),
        // CU_COMPUTEMODE_DEFAULT
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, 0),
    ];
    table
        .iter()
        .find(|(a, _)| *a as i32 == attr)
        .map(|&(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_limits_agree_with_the_executor() {
        use crate::exec::{MAX_BLOCK, MAX_GRID, MAX_SHARED, MAX_THREADS};
        let v = |a: A| value(a as i32).expect("listed");
        assert_eq!(v(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y) as u32, MAX_GRID[1]);
        assert_eq!(v(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X) as u32, MAX_GRID[0]);
        assert_eq!(
            v(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z) as u32,
            MAX_BLOCK[2]
        );
        assert_eq!(
            v(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK) as u32,
            MAX_THREADS
        );
        assert_eq!(
            v(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK) as u32,
            MAX_SHARED
        );
        assert_eq!(value(-5), None);
    }
}
