"""Task formats and loading: KernelBench files and trees, CUDA-L1 records, the bundled suite, and
the seed files a run starts from."""

from cudal1.tasks.cuda_l1 import load_cuda_l1_records
from cudal1.tasks.loading import load_kernelbench_dir, load_task_file, load_tasks
from cudal1.tasks.seed_files import SeedMatch, match_seed_files
from cudal1.tasks.source import (
    TaskError,
    check_task_source,
    import_task_module,
    override_constants,
    task_filename,
)
from cudal1.tasks.suite import QUICK_TASKS, bundled_root, bundled_tasks, cpu_overrides

__all__ = [
    "QUICK_TASKS",
    "SeedMatch",
    "TaskError",
    "bundled_root",
    "bundled_tasks",
    "check_task_source",
    "cpu_overrides",
    "import_task_module",
    "load_cuda_l1_records",
    "load_kernelbench_dir",
    "load_task_file",
    "load_tasks",
    "match_seed_files",
    "override_constants",
    "task_filename",
]
