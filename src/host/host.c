/* placeholder until the host lands */
typedef int wq_host_placeholder;
