// Shared by every shader: push constants as 32 words (the host fills them in the order each
// shader reads them), and the flat invocation index of a 1-D launch that the host may split over
// two dimensions (maxComputeWorkGroupCount[0] is 65535 on some devices).
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push {
  int w[32];
} pc;

uint flat_index() {
  return gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x +
         gl_GlobalInvocationID.x;
}

float pf(int i) {
  return intBitsToFloat(pc.w[i]);
}
