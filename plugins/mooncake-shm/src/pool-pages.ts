import { readFileSync } from 'node:fs';

const SHMEM_ENABLED = '/sys/kernel/mm/transparent_hugepage/shmem_enabled';

/**
 * The pages the kernel gives pool memory (`allocateMemory`: a memfd mapped shared, hinted
 * with MADV_HUGEPAGE), for describe(). Shared memory follows `shmem_enabled`, not the THP
 * setting private memory follows, and distributions often leave it `never`: the pool's
 * copies then walk 4 KiB pages (memcpy from such memory ran up to 27% slower than from huge
 * pages on the bench machine), and the fix is a system setting, which this names.
 */
export function poolPages(path = SHMEM_ENABLED): string {
  let policy: string | undefined;
  try {
    policy = /\[(\w+)\]/.exec(readFileSync(path, 'utf8'))?.[1];
  } catch {
    // No transparent huge pages on this kernel.
  }
  switch (policy) {
    case 'advise':
    case 'always':
    case 'within_size':
    case 'force':
      return `2 MiB where whole huge pages fit (shmem_enabled: ${policy})`;
    case 'never':
    case 'deny':
      return `4 KiB (shmem_enabled: ${policy}; "advise" would let the pool's hint take 2 MiB pages: echo advise > ${SHMEM_ENABLED})`;
    default:
      return '4 KiB (this kernel gives shared memory no transparent huge pages)';
  }
}
