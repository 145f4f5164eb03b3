/* Prints which UCP library serves this process: the version string, the version
 * numbers, and the path of the loaded libucp from /proc/self/maps. With rucx the
 * version string names rucx, and at UCX_LOG_LEVEL=info creating a context logs a line
 * saying rucx was loaded. */
#include <ucp/api/ucp.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    unsigned major, minor, release;
    ucp_params_t params;
    ucp_context_h ctx;
    ucs_status_t st;
    char line[4096];
    FILE *maps;

    ucp_get_version(&major, &minor, &release);
    printf("version: %u.%u.%u\n", major, minor, release);
    printf("version string: %s\n", ucp_get_version_string());
    printf("status string: %s\n", ucs_status_string(UCS_ERR_UNSUPPORTED));

    maps = fopen("/proc/self/maps", "r");
    while (maps != NULL && fgets(line, sizeof(line), maps) != NULL) {
        char *p = strchr(line, '/');
        if (p != NULL && (strstr(p, "libucp") || strstr(p, "rucx_capi"))) {
            printf("mapped: %s", p);
            break;
        }
    }
    if (maps != NULL) {
        fclose(maps);
    }

    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG;
    st = ucp_init(&params, NULL, &ctx);
    printf("ucp_init: %s\n", ucs_status_string(st));
    if (st != UCS_OK) {
        return 1;
    }
    ucp_context_print_info(ctx, stdout);
    ucp_cleanup(ctx);
    return 0;
}
