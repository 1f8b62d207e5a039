// The test cases defined in the other files of tcp_core_test (scripts/native-test.sh), which
// tcp_core_test.cpp's main runs by name.
#pragma once

// receive_path_test.cpp
void test_parse_hello();
void test_body_end_brings_next_header();
void test_after_recv_reads_each_result();
void test_receive_mark();
void test_congestion_control();
// loop_test.cpp
void test_post_wakes_only_a_sleeping_loop();
void test_task_keeps_what_it_holds_through_the_iteration();
// writev_test.cpp, gather_rows_test.cpp, scatter_rows_test.cpp
void test_writev_segments_land_each_on_its_own();
void test_gather_rows_iovecs();
void test_gathered_writes_land_packed();
void test_row_table_of_span();
void test_scattered_writes_land_in_rows();
// control_order_test.cpp
void test_revoke_goes_before_requests();
void test_auth_and_revoke_go_before_requests();
